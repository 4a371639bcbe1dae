#include "peer/http_client.hpp"

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <cctype>
#include <charconv>
#include <optional>
#include <stdexcept>

#include "peer/duration_flag.hpp"

namespace hearsay {

namespace {

constexpr std::size_t kMaxHead = 16 * 1024;  // a reply's status line and headers
constexpr std::size_t kReadChunk = 16 * 1024;

bool is_ipv6(const std::string& host) { return host.find(':') != std::string::npos; }

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::optional<std::uint64_t> parse_unsigned(std::string_view text, int base = 10) {
  std::uint64_t value = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string size_text(std::size_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + " MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + " KiB";
  return std::to_string(bytes) + " bytes";
}

// The port of a URL or "HOST:PORT"; throws through `bad`.
template <class Bad>
std::uint16_t parse_port(std::string_view text, const Bad& bad) {
  const auto port = parse_unsigned(text);
  if (!port) throw bad("the port '" + std::string(text) + "' is not a number");
  if (*port == 0 || *port > 65535) throw bad("the port " + std::string(text) + " is not 1 to 65535");
  return static_cast<std::uint16_t>(*port);
}

}  // namespace

std::string HttpUrl::host_port() const {
  return (is_ipv6(host) ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string HttpUrl::text() const { return "http://" + host_port() + path; }

HttpUrl parse_http_url(std::string_view text, std::string_view default_path) {
  const std::string given(text);
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("'" + given + "' is not a peer's address: " + why +
                                 "; expected http://HOST:PORT, HOST:PORT or :PORT (the peer's --http)");
  };
  if (text.empty()) throw bad("it is empty");
  if (text.find_first_of(" \t\r\n") != std::string_view::npos) throw bad("it holds a space");
  const auto scheme = text.find("://");
  if (scheme != std::string_view::npos) {
    const std::string name = lower(text.substr(0, scheme));
    if (name == "https") throw bad("https is not served (a peer's --http is plain HTTP)");
    if (name != "http") throw bad("the scheme '" + name + "' is not http");
    text.remove_prefix(scheme + 3);
  }
  HttpUrl url;
  const auto slash = text.find('/');
  const std::string_view authority = text.substr(0, slash);
  if (authority.empty()) throw bad("no host");
  const std::string_view path = slash == std::string_view::npos ? std::string_view() : text.substr(slash);
  if (authority.find('@') != std::string_view::npos) throw bad("user names are not supported");
  std::optional<std::string_view> port_text;  // after a ':'
  if (authority.front() == '[') {             // [v6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw bad("a '[' without ']'");
    url.host = std::string(authority.substr(1, close - 1));
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') throw bad("text after ']' that is no :PORT");
    if (!rest.empty()) port_text = rest.substr(1);
  } else {
    const auto colon = authority.rfind(':');
    if (colon != std::string_view::npos && authority.find(':') != colon)
      throw bad("an IPv6 address needs brackets, [::1]:PORT");
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  const bool has_scheme = scheme != std::string_view::npos;
  if (url.host.empty() && has_scheme) throw bad("no host");
  if (url.host.empty()) url.host = "127.0.0.1";  // ":PORT": this machine
  if (!port_text && !has_scheme) throw bad("no port");
  if (port_text) url.port = parse_port(*port_text, bad);
  url.path =
      (path.empty() || path == "/" || path == "/metrics") ? std::string(default_path) : std::string(path);
  return url;
}

// ---- replies -------------------------------------------------------------------------------

namespace {

struct Head {
  std::size_t body_at = 0;  // after the blank line
  int status = 0;
  std::string reason;
  std::optional<std::uint64_t> content_length;
  bool chunked = false;
};

// The status line and headers, or why not.
std::optional<Head> parse_head(std::string_view raw, std::string& error) {
  const auto end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/", 0) != 0 && raw.size() >= 5) {
    error = "bad reply: not HTTP";
    return std::nullopt;
  }
  if (end == std::string_view::npos) {
    error = raw.empty() ? "bad reply: the connection closed without an answer"
                        : "bad reply: the connection closed inside the reply's head";
    return std::nullopt;
  }
  Head head;
  head.body_at = end + 4;
  std::string_view lines = raw.substr(0, end);
  const auto eol = lines.find("\r\n");
  const std::string_view status_line = lines.substr(0, eol);
  const auto sp = status_line.find(' ');
  const auto code =
      sp == std::string_view::npos ? std::nullopt : parse_unsigned(status_line.substr(sp + 1, 3));
  if (!code || *code < 100 || *code > 599) {
    error = "bad reply: no status code in '" + std::string(status_line.substr(0, 60)) + "'";
    return std::nullopt;
  }
  head.status = static_cast<int>(*code);
  head.reason =
      std::string(trim(status_line.size() > sp + 4 ? status_line.substr(sp + 4) : std::string_view()));
  lines = eol == std::string_view::npos ? std::string_view() : lines.substr(eol + 2);
  while (!lines.empty()) {
    const auto next = lines.find("\r\n");
    const std::string_view line = lines.substr(0, next);
    lines = next == std::string_view::npos ? std::string_view() : lines.substr(next + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-length") {
      head.content_length = parse_unsigned(value);
      if (!head.content_length) {
        error = "bad reply: Content-Length '" + std::string(value.substr(0, 30)) + "' is not a number";
        return std::nullopt;
      }
    } else if (name == "transfer-encoding") {
      head.chunked = lower(value).find("chunked") != std::string::npos;
    }
  }
  return head;
}

// A chunked body decoded, or why not.
std::optional<std::string> dechunk(std::string_view data, std::size_t max_body, std::string& error) {
  std::string body;
  for (;;) {
    const auto eol = data.find("\r\n");
    if (eol == std::string_view::npos) break;
    std::string_view line = data.substr(0, eol);
    line = trim(line.substr(0, line.find(';')));
    const auto size = parse_unsigned(line, 16);
    if (!size) break;
    if (*size == 0) return body;
    if (*size > max_body - body.size() || data.size() < eol + 2 + *size) {
      error = *size > max_body - body.size() ? "bad reply: a body over " + size_text(max_body)
                                             : "bad reply: a chunk cut short";
      return std::nullopt;
    }
    body.append(data.substr(eol + 2, *size));
    data.remove_prefix(std::min(data.size(), eol + 2 + *size + 2));
  }
  error = "bad reply: a broken chunked body";
  return std::nullopt;
}

}  // namespace

HttpReply parse_http_reply(std::string_view raw, std::size_t max_body) {
  HttpReply reply;
  const std::optional<Head> head = parse_head(raw, reply.error);
  if (!head) return reply;
  std::string_view rest = raw.substr(head->body_at);
  if (head->chunked) {
    auto body = dechunk(rest, max_body, reply.error);
    if (!body) return reply;
    reply.body = std::move(*body);
  } else {
    if (head->content_length && rest.size() < *head->content_length) {
      reply.error = "bad reply: the body ended after " + std::to_string(rest.size()) + " of " +
                    std::to_string(*head->content_length) + " bytes";
      return reply;
    }
    if (head->content_length) rest = rest.substr(0, *head->content_length);
    if (rest.size() > max_body) {
      reply.error = "bad reply: a body over " + size_text(max_body);
      return reply;
    }
    reply.body = std::string(rest);
  }
  reply.answered = true;
  reply.status = head->status;
  if (head->status != 200) {
    std::string said = reply.body.substr(0, reply.body.find('\n')).substr(0, 80);
    reply.error = "bad reply: HTTP " + std::to_string(head->status) + (head->reason.empty() ? "" : " ") +
                  head->reason + (said.empty() ? "" : " (" + said + ")");
  }
  return reply;
}

bool http_reply_complete(std::string_view raw) {
  std::string error;
  if (raw.find("\r\n\r\n") == std::string_view::npos) return false;
  const std::optional<Head> head = parse_head(raw, error);
  return head && !head->chunked && head->content_length &&
         raw.size() - head->body_at >= *head->content_length;
}

// ---- the client ------------------------------------------------------------------------------

struct HttpClient::Impl {
  asio::io_context io;
};

namespace {

std::string connect_error(const asio::error_code& ec, const HttpUrl& url) {
  if (ec == asio::error::connection_refused) return "connection refused";
  if (ec == asio::error::host_not_found || ec == asio::error::host_not_found_try_again)
    return "cannot resolve host '" + url.host + "'";
  if (ec == asio::error::network_unreachable || ec == asio::error::host_unreachable) return "unreachable";
  if (ec == asio::error::connection_reset) return "connection reset";
  return ec.message();
}

// One GET: resolve (names only), connect, send, read until the reply is whole, the
// connection ends or the reply grows over its limit. Its handlers keep it alive; once
// abandoned (the deadline passed) they only close it.
class Request : public std::enable_shared_from_this<Request> {
 public:
  Request(asio::io_context& io, HttpUrl url, std::size_t max_body)
      : url_(std::move(url)), max_body_(max_body), resolver_(io), socket_(io) {}

  void start() {
    asio::error_code ec;
    const auto address = asio::ip::make_address(url_.host, ec);
    if (!ec) {
      connect(std::vector<asio::ip::tcp::endpoint>{{address, url_.port}});
      return;
    }
    stage_ = "resolving the host";
    auto self = shared_from_this();
    resolver_.async_resolve(
        url_.host, std::to_string(url_.port),
        [self](const asio::error_code& e, asio::ip::tcp::resolver::results_type results) {
          if (self->done_) return;
          if (e) return self->finish_error(connect_error(e, self->url_));
          self->connect(std::vector<asio::ip::tcp::endpoint>(results.begin(), results.end()));
        });
  }

  // The deadline passed: the reply is a timeout, and the connection is closed.
  void abandon(const std::string& after) {
    if (done_) return;
    finish_error("timed out after " + after + " " + stage_);
  }

  bool done() const { return done_; }
  const HttpReply& reply() const { return reply_; }

 private:
  void connect(const std::vector<asio::ip::tcp::endpoint>& endpoints) {
    stage_ = "connecting";
    auto self = shared_from_this();
    asio::async_connect(socket_, endpoints,
                        [self](const asio::error_code& e, const asio::ip::tcp::endpoint&) {
                          if (self->done_) return;
                          if (e) return self->finish_error(connect_error(e, self->url_));
                          self->send();
                        });
  }

  void send() {
    stage_ = "sending the request";
    request_ = "GET " + url_.path + " HTTP/1.1\r\nHost: " + url_.host_port() +
               "\r\nUser-Agent: hearsay-watch\r\nAccept: application/json\r\nConnection: close\r\n\r\n";
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(request_), [self](const asio::error_code& e, std::size_t) {
      if (self->done_) return;
      if (e) return self->finish_error(connect_error(e, self->url_));
      self->stage_ = "waiting for the reply";
      self->read();
    });
  }

  void read() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(chunk_), [self](const asio::error_code& e, std::size_t n) {
      if (self->done_) return;
      self->raw_.append(self->chunk_.data(), n);
      if (self->raw_.size() > self->max_body_ + kMaxHead)
        return self->finish_error("bad reply: over " + size_text(self->max_body_ + kMaxHead));
      if (e == asio::error::eof || http_reply_complete(self->raw_)) return self->finish_reply();
      if (e) return self->finish_error(connect_error(e, self->url_));
      self->stage_ = "reading the reply";
      self->read();
    });
  }

  void finish_reply() {
    reply_ = parse_http_reply(raw_, max_body_);
    close();
  }

  void finish_error(std::string why) {
    reply_ = HttpReply{};
    reply_.error = std::move(why);
    close();
  }

  void close() {
    done_ = true;
    asio::error_code ignored;
    resolver_.cancel();
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  HttpUrl url_;
  std::size_t max_body_;
  asio::ip::tcp::resolver resolver_;
  asio::ip::tcp::socket socket_;
  std::string request_;
  std::array<char, kReadChunk> chunk_{};
  std::string raw_;
  std::string stage_ = "connecting";
  bool done_ = false;
  HttpReply reply_;
};

}  // namespace

HttpClient::HttpClient() : impl_(std::make_unique<Impl>()) {}

HttpClient::~HttpClient() {
  if (impl_) impl_->io.stop();
}

std::vector<HttpReply> HttpClient::get_all(const std::vector<HttpUrl>& urls, std::chrono::nanoseconds timeout,
                                           std::size_t max_body) {
  asio::io_context& io = impl_->io;
  io.restart();
  std::vector<std::shared_ptr<Request>> requests;
  requests.reserve(urls.size());
  for (const HttpUrl& url : urls) {
    requests.push_back(std::make_shared<Request>(io, url, max_body));
    requests.back()->start();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto pending = [&] {
    return std::any_of(requests.begin(), requests.end(), [](const auto& r) { return !r->done(); });
  };
  while (pending() && io.run_one_until(deadline) > 0) {
  }
  const std::string after = format_duration(std::chrono::duration_cast<Duration>(timeout));
  for (const auto& r : requests) r->abandon(after);
  io.poll();  // the closed sockets' handlers, which now only return
  std::vector<HttpReply> replies;
  replies.reserve(requests.size());
  for (const auto& r : requests) replies.push_back(r->reply());
  return replies;
}

}  // namespace hearsay
