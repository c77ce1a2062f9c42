// spdlog and fmt, compiled once for the whole build (the gpool::spdlog static library).
//
// Both are header-only in Debian's packages unless their shared libraries are linked, and gpool's daemons carry
// no shared-library dependency to a GPU host beyond glibc and CUDA (scripts/pack_gpu.sh). Header-only, every file
// that logs compiled both libraries' implementations again (two thirds of a worker file's compile time). Here
// they are compiled in this one file instead: the rest of the build sees SPDLOG_COMPILED_LIB (declarations only)
// and links what this file defines. The explicit instantiations below are the templates those declarations leave
// undefined; one that is missing fails the link, naming it.
#ifndef SPDLOG_COMPILED_LIB
#error "logging_library.cpp is built with SPDLOG_COMPILED_LIB (gpool::spdlog in the top-level CMakeLists.txt)"
#endif
#ifdef FMT_HEADER_ONLY
#error "logging_library.cpp defines fmt's functions out of line: build it without FMT_HEADER_ONLY"
#endif

#include <fmt/format-inl.h>

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

#include <locale>
#include <mutex>

// fmt: the function templates format.h declares for char and wchar_t and defines in format-inl.h.
FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE

// spdlog: the sinks gpool uses (the daemons' colored stderr, daemon_log.h; tests' ostream sinks) and the
// factory of the first.
template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
template std::shared_ptr<spdlog::logger> spdlog::stderr_color_mt<spdlog::synchronous_factory>(const std::string&,
                                                                                            color_mode);
