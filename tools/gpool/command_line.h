// Where gpool's own options end on its command line. `gpool run [OPTIONS] COMMAND [ARGS...]` reads as sudo
// or env read theirs: the first argument that is neither one of gpool's options nor an option's value
// starts the command, so the command's own options (`python train.py -n 5`) are never taken for gpool's.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace gpool::cli {

// `args` (without the program's name) with "--" put before the command of subcommand `sub` of `app`
// where none is there yet; unchanged otherwise, and where an option before it is not gpool's (for CLI11 to
// refuse by name). Options are known from `app`'s definitions: one that takes a value (and does not carry
// it, as --pool=gpu or -n2 do) takes the next argument with it.
std::vector<std::string> markCommandStart(const CLI::App& app, const std::string& sub, std::vector<std::string> args);

}  // namespace gpool::cli
