#include "allocator_connection.h"

#include <unistd.h>

#include <stdexcept>

namespace gpool::token {

std::unique_ptr<httplib::Client> allocatorClient(const std::string& url, const std::string& ca_file, int read_timeout_s) {
  bool tls = url.rfind("https://", 0) == 0;
  if (!tls && url.rfind("http://", 0) != 0)
    throw std::invalid_argument("the allocator's URL must be http://HOST:PORT or https://HOST:PORT, not '" + url + "'");
  if (!ca_file.empty() && ::access(ca_file.c_str(), R_OK) != 0)
    throw std::invalid_argument("cannot read the CA file " + ca_file);
  auto cli = std::make_unique<httplib::Client>(url);
  if (tls) {
    cli->enable_server_certificate_verification(true);
    if (!ca_file.empty()) cli->set_ca_cert_path(ca_file.c_str());
  }
  cli->set_connection_timeout(3, 0);
  cli->set_read_timeout(read_timeout_s, 0);
  cli->set_tcp_nodelay(true);
  return cli;
}

}  // namespace gpool::token
