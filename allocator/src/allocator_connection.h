// How gpool-server and the gpool command connect to gpool-allocator over the network: http://HOST:PORT,
// or https://HOST:PORT with the allocator's certificate verified against a CA file (gpool-server
// --allocator-ca, GPOOL_CA_FILE) or else the system's CA store.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

namespace gpool::token {

// A client for `url` with its timeouts set. Throws std::invalid_argument naming the fix for a URL that is
// neither http:// nor https://, or a CA file that cannot be read.
std::unique_ptr<httplib::Client> allocatorClient(const std::string& url, const std::string& ca_file, int read_timeout_s);

}  // namespace gpool::token
