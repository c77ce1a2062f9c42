// Where gpool's own options end (command_line.h).
#include "command_line.h"

namespace gpool::cli {
namespace {

// The option `arg` names among `app`'s (its value attached or not: --pool=gpu, -n2), or nullptr.
const CLI::Option* optionNamed(const CLI::App& app, const std::string& arg) {
  if (const CLI::Option* opt = app.get_option_no_throw(arg.substr(0, arg.find('=')))) return opt;
  return arg.size() > 2 && arg[1] != '-' ? app.get_option_no_throw(arg.substr(0, 2)) : nullptr;
}

// Whether `arg`, one of `app`'s options, takes the next argument as its value.
bool takesNextArgument(const CLI::Option& opt, const std::string& arg) {
  bool attached = arg.find('=') != std::string::npos || (arg.size() > 2 && arg[1] != '-');
  return !attached && opt.get_expected_min() > 0;
}

}  // namespace

std::vector<std::string> markCommandStart(const CLI::App& app, const std::string& sub, std::vector<std::string> args) {
  const CLI::App* at = &app;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return args;
    if (a.size() > 1 && a[0] == '-') {
      const CLI::Option* opt = optionNamed(*at, a);
      if (!opt) return args;  // not gpool's: CLI11 says so
      if (takesNextArgument(*opt, a)) ++i;
      continue;
    }
    if (at->get_name() == sub) {
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(i), "--");
      return args;
    }
    auto named = at->get_subcommands([&a](const CLI::App* s) { return s->check_name(a); });
    if (!named.empty()) at = named.front();
  }
  return args;
}

}  // namespace gpool::cli
