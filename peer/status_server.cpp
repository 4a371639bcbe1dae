#include "peer/status_server.hpp"

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <exception>
#include <istream>
#include <stdexcept>
#include <thread>

#include "base/log.hpp"
#include "base/thread_name.hpp"

namespace hearsay {

namespace {
constexpr std::size_t kMaxRequestHead = 8192;
constexpr auto kClientTimeout = std::chrono::seconds(5);

std::string response(int code, std::string_view reason, std::string_view content_type,
                     std::string_view body) {
  std::string out = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
  out += "Content-Type: " + std::string(content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += body;
  return out;
}
}  // namespace

HttpListen parse_http_listen(const std::string& value) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("--http '" + value + "': " + why + "; expected :PORT, PORT or HOST:PORT");
  };
  HttpListen out;
  std::string port_text;
  const auto colon = value.rfind(':');
  if (colon == std::string::npos) {
    out.host = "0.0.0.0";
    port_text = value;
  } else {
    out.host = value.substr(0, colon);
    port_text = value.substr(colon + 1);
    if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']')
      out.host = out.host.substr(1, out.host.size() - 2);
    if (out.host.empty()) out.host = "0.0.0.0";
  }
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    throw bad("the port is not a number");
  const unsigned long port = std::stoul(port_text);
  if (port > 65535) throw bad("the port is above 65535");
  out.port = static_cast<std::uint16_t>(port);
  return out;
}

struct StatusServer::Impl {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  SnapshotFn snapshot;
  std::atomic<std::uint64_t> served{0};
  std::uint16_t port = 0;
  std::thread thread;

  void accept();
  std::string answer(const std::string& method, const std::string& target);
};

namespace {

// One connection: read the request head (bounded in size and time), answer, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(asio::ip::tcp::socket socket, StatusServer::Impl& server)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(kMaxRequestHead),
        server_(server) {}

  void start() {
    auto self = shared_from_this();
    timer_.expires_after(kClientTimeout);
    timer_.async_wait([self](const asio::error_code& ec) {
      if (!ec) {
        asio::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    asio::async_read_until(socket_, buffer_, "\r\n\r\n",
                           [self](const asio::error_code& ec, std::size_t) { self->on_head(ec); });
  }

 private:
  void on_head(const asio::error_code& ec) {
    if (ec == asio::error::not_found) {  // the head outgrew the buffer
      send(response(400, "Bad Request", "text/plain", "request head over 8 KiB\n"));
      return;
    }
    if (ec) {  // closed early or timed out: nothing to answer
      timer_.cancel();
      return;
    }
    std::istream in(&buffer_);
    std::string method, target, version;
    in >> method >> target >> version;
    if (method.empty() || target.empty() || version.rfind("HTTP/", 0) != 0) {
      send(response(400, "Bad Request", "text/plain", "not an HTTP request\n"));
      return;
    }
    send(server_.answer(method, target));
  }

  void send(std::string text) {
    text_ = std::move(text);
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(text_), [self](const asio::error_code&, std::size_t) {
      asio::error_code ignored;
      self->socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      self->socket_.close(ignored);
      self->timer_.cancel();
    });
  }

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  asio::streambuf buffer_;
  std::string text_;
  StatusServer::Impl& server_;
};

}  // namespace

void StatusServer::Impl::accept() {
  acceptor.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) std::make_shared<Session>(std::move(socket), *this)->start();
    accept();
  });
}

std::string StatusServer::Impl::answer(const std::string& method, const std::string& target) {
  const std::string path = target.substr(0, target.find('?'));
  if (path != "/metrics" && path != "/status")
    return response(404, "Not Found", "text/plain", "unknown path " + path + "; try /metrics or /status\n");
  if (method != "GET" && method != "HEAD")
    return response(405, "Method Not Allowed", "text/plain", "only GET is served\n");
  Snapshot s;
  try {
    s = snapshot();
  } catch (const std::exception& e) {
    return response(500, "Internal Server Error", "text/plain",
                    std::string("no snapshot: ") + e.what() + "\n");
  }
  served.fetch_add(1, std::memory_order_relaxed);
  std::string body;
  std::string type;
  if (path == "/metrics") {
    body = to_prometheus(s.metrics);
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else {
    nlohmann::json status = s.status.is_object() ? s.status : nlohmann::json::object();
    status["metrics"] = to_json(s.metrics);
    body = status.dump() + "\n";
    type = "application/json";
  }
  std::string out = response(200, "OK", type, body);
  if (method == "HEAD") out.resize(out.size() - body.size());
  return out;
}

StatusServer::StatusServer(const std::string& listen, SnapshotFn snapshot) : impl_(std::make_unique<Impl>()) {
  if (!snapshot) throw std::invalid_argument("StatusServer: no snapshot function");
  impl_->snapshot = std::move(snapshot);
  const HttpListen where = parse_http_listen(listen);
  asio::error_code ec;
  auto address = asio::ip::make_address(where.host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(impl_->io);
    auto results = resolver.resolve(where.host, std::to_string(where.port), ec);
    if (ec || results.empty())
      throw std::runtime_error("--http " + listen + ": cannot resolve host '" + where.host +
                               "': " + ec.message());
    address = results.begin()->endpoint().address();
  }
  const asio::ip::tcp::endpoint endpoint(address, where.port);
  auto& acceptor = impl_->acceptor;
  const auto fail = [&](const char* what) {
    return std::runtime_error("--http " + listen + ": cannot " + what + " " + endpoint.address().to_string() +
                              ":" + std::to_string(where.port) + ": " + ec.message() +
                              " (choose another port, or stop the process that uses it)");
  };
  if (acceptor.open(endpoint.protocol(), ec)) throw fail("open a socket for");
  acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec)) throw fail("listen on");
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) throw fail("listen on");
  impl_->port = acceptor.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] {
    name_this_thread("hs-http");
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      logging::error(std::string("--http server stopped: ") + e.what());
    }
  });
}

StatusServer::~StatusServer() {
  if (!impl_) return;
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t StatusServer::port() const noexcept { return impl_->port; }
std::uint64_t StatusServer::requests_served() const noexcept {
  return impl_->served.load(std::memory_order_relaxed);
}

}  // namespace hearsay
