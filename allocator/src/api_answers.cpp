#include "api_answers.h"

#include <httplib.h>

#include <chrono>
#include <stdexcept>

#include "gpool/allocator/lease_token.h"

namespace gpool::allocator {

using nlohmann::json;

bool parseBody(const httplib::Request& req, httplib::Response& res, json& out) {
  try {
    out = json::parse(req.body.empty() ? "{}" : req.body);
    if (!out.is_object()) throw std::invalid_argument("not an object");
    return true;
  } catch (const std::exception&) {
    error(res, 400, "the body must be a JSON object");
    return false;
  }
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Messages may echo what a client sent (an id, a name): bytes that are not UTF-8 are replaced.
  res.set_content(body.dump(2, ' ', false, json::error_handler_t::replace) + "\n", "application/json");
}

void error(httplib::Response& res, int status, const std::string& why) { reply(res, status, {{"error", why}}); }

json identityJson(const Identity& who, bool admin) {
  return {{"user", who.user}, {"group", who.group}, {"groups", who.groups}, {"via", viaName(who.via)}, {"admin", admin}};
}

std::string newLeaseId() { return "L" + token::randomHex(12); }

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace gpool::allocator
