// How gpool-allocator's API reads requests and answers them (docs/api.md): JSON bodies, replies, errors,
// the ids it makes, and the time in unix seconds. Shared by the files of the service's routes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "identity.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace gpool::allocator {

// The body as a JSON object ("" reads as {}); otherwise answers 400 and returns false.
bool parseBody(const httplib::Request& req, httplib::Response& res, nlohmann::json& out);
void reply(httplib::Response& res, int status, const nlohmann::json& body);
void error(httplib::Response& res, int status, const std::string& why);  // {"error": why}
nlohmann::json identityJson(const Identity& who, bool admin);
std::string newLeaseId();
int64_t unixSeconds();

}  // namespace gpool::allocator
