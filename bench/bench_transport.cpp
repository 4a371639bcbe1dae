// Transport throughput: one-way transfer of a parameter message between two ZeroMQ
// transports over tcp on 127.0.0.1, with and without CURVE, for the LeNet parameter
// vector (129,068 floats, 516 KB) and a 100 MB one; the ratio to a plain memcpy of the
// same bytes measured in the same run; the zero-copy (borrowed) send against one copy
// into the message; and the cost of encoding plus decoding one header.
//
// A transfer is timed from send() to the receiver holding the admitted Message, so it
// includes both checksums (XXH3 of the payload on each side) and the receiver's
// finite-values check; "+decode" also copies the values into a float buffer. Progress
// and a table go to stderr, one JSON line with every figure to stdout.
//
// --two-processes puts the receiver in a forked child, as peers are: each side has its
// own heap and ZeroMQ I/O thread, and the child stamps each arrival on the clock both
// processes share (bench/bench_two_process.hpp). Only borrowed sends are timed there.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "base/log.hpp"
#include "bench/bench_two_process.hpp"
#include "bench/bench_util.hpp"
#include "gossip/network/transport/allocator_policy.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "gossip/network/wire/header.hpp"
#include "gossip/network/wire/payload.hpp"

using namespace hearsay;
using namespace hearsay::transport;
using namespace hearsay::bench;

namespace {

struct Setup {
  bool curve = false;
  int socket_buffer = 0;
  int io_threads = 1;
};

ZmqOptions options_for(const std::string& id, const Setup& setup, const transport::CurveKeyPair& own,
                       const transport::CurveKeyPair& other) {
  ZmqOptions o;
  o.id = id;
  o.expect = {"bench", "bench-model"};
  o.socket_buffer_bytes = setup.socket_buffer;
  o.io_threads = setup.io_threads;
  o.linger = std::chrono::milliseconds(0);
  if (setup.curve) {
    o.security.keypair = own;
    o.security.authorized = transport::AuthorizedKeys{{{other.public_z85, "other"}}};
  } else {
    o.security.insecure = true;
  }
  return o;
}

wire::Header bench_header(int round) {
  wire::Header header;
  header.type = wire::MessageType::params_push;
  header.step = static_cast<std::uint64_t>(round);
  return header;
}

enum class Mode { borrow, copy };

// Median seconds of one send -> admitted Message (and, with decode, -> floats).
double time_transfer(Transport& from, Transport& to, const std::shared_ptr<std::vector<float>>& values,
                     std::vector<float>& destination, Mode mode, bool decode, int repeats) {
  std::vector<double> times;
  for (int r = 0; r < repeats + 1; ++r) {  // the first one warms up connection and pages
    const auto t0 = Clock::now();
    from.send("b", bench_header(r),
              mode == Mode::borrow ? Payload::borrow_f32(*values, values) : Payload::copy_f32(*values));
    auto message = to.receive(Clock::now() + std::chrono::seconds(60));
    if (!message) throw std::runtime_error("bench: a message did not arrive within 60 s");
    if (decode) message->decode_into(destination);
    const double s = seconds_since(t0);
    if (r > 0) times.push_back(s);
  }
  return median(times);
}

double time_memcpy(const std::vector<float>& src, std::vector<float>& dst, int repeats) {
  std::vector<double> times;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    const double s = seconds_since(t0);
    if (r > 0) times.push_back(s);
  }
  // Keep the copy observable so it is not optimised away.
  if (dst[src.size() / 2] != src[src.size() / 2]) std::fprintf(stderr, "memcpy mismatch\n");
  return median(times);
}

double time_header_roundtrip(int iterations) {
  wire::Header h;
  h.run_id = "run-2024-06-01";
  h.fingerprint = "lenet-129068-49e7819947dd1a80";
  h.sender = "peer-17";
  h.type = wire::MessageType::params_push;
  h.step = 123456;
  h.dtype = wire::Dtype::f32;
  h.count = 129068;
  h.checksum = 0x0123456789abcdefull;
  h.nonce = 42;
  std::size_t sink = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    h.step = static_cast<std::uint64_t>(i);
    const auto bytes = wire::encode_header(h);
    const auto decoded = wire::decode_header(bytes);
    sink += decoded.header ? decoded.header->step : 0;
  }
  const double s = seconds_since(t0);
  if (sink == 42) std::fprintf(stderr, " ");
  return s / iterations;
}

struct CheckTimes {
  double checksum_s, finite_s;
};

CheckTimes time_payload_checks(const std::vector<float>& values, int repeats) {
  const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(values.data()),
                                            values.size() * sizeof(float));
  std::vector<double> checksum_times, finite_times;
  std::uint64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    sink ^= wire::checksum(bytes);
    checksum_times.push_back(seconds_since(t0));
    t0 = Clock::now();
    sink += wire::check_values(wire::Dtype::f32, values.size(), bytes).has_value();
    finite_times.push_back(seconds_since(t0));
  }
  if (sink == 42) std::fprintf(stderr, " ");
  return {median(checksum_times), median(finite_times)};
}

// The bare sockets' options: no linger, and the socket buffers when asked for.
void configure_raw_socket(zmq::socket_t& socket, int socket_buffer) {
  socket.set(zmq::sockopt::linger, 0);
  if (socket_buffer > 0) {
    socket.set(zmq::sockopt::sndbuf, socket_buffer);
    socket.set(zmq::sockopt::rcvbuf, socket_buffer);
  }
}

// The ceiling: the same bytes from a bare DEALER to a bare ROUTER over tcp, zero-copy,
// no header, no checks.
double time_raw_zmq(const std::shared_ptr<std::vector<float>>& values, int socket_buffer, int repeats) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router), dealer(context, zmq::socket_type::dealer);
  configure_raw_socket(router, socket_buffer);
  configure_raw_socket(dealer, socket_buffer);
  router.bind("tcp://127.0.0.1:*");
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  std::vector<double> times;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
    zmq::message_t out(
        values->data(), values->size() * sizeof(float), [](void*, void*) {}, nullptr);
    dealer.send(out, zmq::send_flags::none);
    zmq::message_t identity, in;
    (void)router.recv(identity);
    (void)router.recv(in);
    const double s = seconds_since(t0);
    if (r > 0) times.push_back(s);
  }
  return median(times);
}

// As time_transfer (borrowed send), with the receiving transport in a child process.
double time_transfer_two_process(const Setup& setup, const transport::CurveKeyPair& keys_a,
                                 const transport::CurveKeyPair& keys_b,
                                 const std::shared_ptr<std::vector<float>>& values, bool decode,
                                 int repeats) {
  const std::size_t n = values->size();
  ReceiverProcess child([&](const ChildChannel& channel) {
    ZmqTransport b(options_for("b", setup, keys_b, keys_a));
    channel.send_address(b.address());
    std::vector<float> destination(n);
    for (int r = 0; r < repeats + 1; ++r) {
      auto message = b.receive(Clock::now() + std::chrono::seconds(60));
      if (!message) throw std::runtime_error("a message did not arrive within 60 s");
      if (decode) message->decode_into(destination);
      channel.send_timestamp();
    }
    return 0;
  });
  const std::string address = child.read_address();
  std::vector<double> times;
  {
    ZmqTransport a(options_for("a", setup, keys_a, keys_b));
    a.connect("b", address);
    for (int r = 0; r < repeats + 1; ++r) {  // the first one warms up connection and pages
      const auto t0 = Clock::now();
      a.send("b", bench_header(r), Payload::borrow_f32(*values, values));
      const auto t1 = child.read_timestamp();
      if (r > 0) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  if (child.wait() != 0) throw std::runtime_error("bench: the receiver process failed");
  return median(times);
}

// As time_raw_zmq, with the ROUTER in a child process.
double time_raw_zmq_two_process(const std::shared_ptr<std::vector<float>>& values, int socket_buffer,
                                int repeats) {
  ReceiverProcess child([&](const ChildChannel& channel) {
    zmq::context_t context;
    zmq::socket_t router(context, zmq::socket_type::router);
    configure_raw_socket(router, socket_buffer);
    router.bind("tcp://127.0.0.1:*");
    channel.send_address(router.get(zmq::sockopt::last_endpoint));
    for (int r = 0; r < repeats + 1; ++r) {
      zmq::message_t identity, in;
      if (!router.recv(identity) || !router.recv(in)) return 1;
      channel.send_timestamp();
    }
    return 0;
  });
  const std::string address = child.read_address();
  std::vector<double> times;
  {
    zmq::context_t context;
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    configure_raw_socket(dealer, socket_buffer);
    dealer.connect(address);
    for (int r = 0; r < repeats + 1; ++r) {
      const auto t0 = Clock::now();
      zmq::message_t out(
          values->data(), values->size() * sizeof(float), [](void*, void*) {}, nullptr);
      dealer.send(out, zmq::send_flags::none);
      const auto t1 = child.read_timestamp();
      if (r > 0) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  if (child.wait() != 0) throw std::runtime_error("bench: the bare ZeroMQ receiver process failed");
  return median(times);
}

// For comparison: the same bytes over one plain TCP connection between the two
// processes, blocking send() and recv() into a buffer that stays paged in (not a ceiling:
// ZeroMQ's non-blocking engine can beat it).
double time_raw_tcp_two_process(const std::vector<float>& values, int repeats) {
  const std::size_t bytes = values.size() * sizeof(float);
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error("bench: cannot listen on 127.0.0.1");
  ReceiverProcess child([&](const ChildChannel& channel) {
    ::close(listener);
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return 1;
    channel.send_address("connected");
    std::vector<char> in(bytes, 1);
    for (int r = 0; r < repeats + 1; ++r) {
      for (std::size_t got = 0; got < bytes;) {
        const ssize_t n = ::recv(s, in.data() + got, bytes - got, 0);
        if (n <= 0) return 1;
        got += static_cast<std::size_t>(n);
      }
      channel.send_timestamp();
    }
    ::close(s);
    return 0;
  });
  const int connection = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (connection < 0) throw std::runtime_error("bench: accept() failed");
  (void)child.read_address();
  std::vector<double> times;
  const char* data = reinterpret_cast<const char*>(values.data());
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
    for (std::size_t sent = 0; sent < bytes;) {
      const ssize_t n = ::send(connection, data + sent, bytes - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("bench: send() over plain TCP failed");
      sent += static_cast<std::size_t>(n);
    }
    const auto t1 = child.read_timestamp();
    if (r > 0) times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  ::close(connection);
  if (child.wait() != 0) throw std::runtime_error("bench: the plain TCP receiver process failed");
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hearsay transport benchmark (one JSON line on stdout)"};
  int repeats = 7;
  int socket_buffer = 0;
  int io_threads = 1;
  double big_mb = 100;
  app.add_option("--repeats", repeats, "timed transfers per case (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--socket-buffer", socket_buffer, "SO_SNDBUF/SO_RCVBUF in bytes (0: OS autotuning)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--io-threads", io_threads, "ZeroMQ I/O threads per transport")->check(CLI::PositiveNumber);
  bool fresh_heap = false;
  app.add_flag("--fresh-heap", fresh_heap,
               "leave glibc's allocator as it is (fresh mmaps for large received messages) instead of "
               "transport::keep_large_allocations_paged_in(), as the hearsay binary does");
  app.add_option("--big-mb", big_mb, "size of the large message in MB (10^6 bytes)")
      ->check(CLI::PositiveNumber);
  bool two_processes = false;
  app.add_flag("--two-processes", two_processes,
               "receiver in a forked child process, as peers are (own heap and I/O thread per side); "
               "times borrowed sends only");
  CLI11_PARSE(app, argc, argv);
  if (!fresh_heap) keep_large_allocations_paged_in();
  logging::set_level(logging::Level::error);  // no insecure-mode warnings in the output

  const std::size_t lenet = 129'068;
  const auto big = static_cast<std::size_t>(big_mb * 1e6 / sizeof(float));
  nlohmann::json out;
  out["header_encode_decode_us"] = time_header_roundtrip(100'000) * 1e6;
  std::fprintf(stderr, "header encode+decode: %.2f us\n", out["header_encode_decode_us"].get<double>());

  const auto keys_a = transport::generate_curve_keypair(), keys_b = transport::generate_curve_keypair();
  std::fprintf(stderr, "%-10s %-6s %-7s %12s %12s %12s %10s\n", "size", "curve", "send", "GB/s",
               "+decode GB/s", "memcpy GB/s", "vs memcpy");
  for (std::size_t n : {lenet, big}) {
    auto values = std::make_shared<std::vector<float>>(n);
    for (std::size_t i = 0; i < n; ++i) (*values)[i] = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
    std::vector<float> destination(n, 0.0f);
    const double bytes = static_cast<double>(n * sizeof(float));
    const double memcpy_s = time_memcpy(*values, destination, repeats);
    const CheckTimes checks = time_payload_checks(*values, repeats);
    const double raw_s = two_processes ? time_raw_zmq_two_process(values, socket_buffer, repeats)
                                       : time_raw_zmq(values, socket_buffer, repeats);
    nlohmann::json size_entry;
    size_entry["floats"] = n;
    size_entry["bytes"] = n * sizeof(float);
    size_entry["memcpy_gbps"] = bytes / memcpy_s / 1e9;
    size_entry["checksum_ms"] = checks.checksum_s * 1e3;
    size_entry["finite_check_ms"] = checks.finite_s * 1e3;
    size_entry["raw_zmq_gbps"] = bytes / raw_s / 1e9;
    if (two_processes) {
      const double tcp_s = time_raw_tcp_two_process(*values, repeats);
      size_entry["raw_tcp_gbps"] = bytes / tcp_s / 1e9;
      std::fprintf(stderr, "%zu bytes: plain TCP between the two processes %.2f GB/s\n", n * sizeof(float),
                   bytes / tcp_s / 1e9);
    }
    std::fprintf(
        stderr,
        "%zu bytes: memcpy %.2f GB/s, XXH3 checksum %.2f ms, finite check %.2f ms, bare ZeroMQ %.2f GB/s\n",
        n * sizeof(float), bytes / memcpy_s / 1e9, checks.checksum_s * 1e3, checks.finite_s * 1e3,
        bytes / raw_s / 1e9);
    // One transfer's figures: a JSON entry and a table line.
    auto record = [&](bool curve, const char* mode_name, double s, double s_decode) {
      nlohmann::json r;
      r["curve"] = curve;
      r["send"] = mode_name;
      r["median_s"] = s;
      r["gbps"] = bytes / s / 1e9;
      r["gbps_with_decode"] = bytes / s_decode / 1e9;
      r["fraction_of_memcpy"] = memcpy_s / s;
      size_entry["transfers"].push_back(r);
      std::fprintf(stderr, "%-10zu %-6s %-7s %12.2f %12.2f %12.2f %10.3f\n", n * sizeof(float),
                   curve ? "yes" : "no", mode_name, bytes / s / 1e9, bytes / s_decode / 1e9,
                   bytes / memcpy_s / 1e9, memcpy_s / s);
    };
    for (bool curve : {false, true}) {
      const Setup setup{curve, socket_buffer, io_threads};
      if (two_processes) {
        record(curve, "borrow", time_transfer_two_process(setup, keys_a, keys_b, values, false, repeats),
               time_transfer_two_process(setup, keys_a, keys_b, values, true, repeats));
        continue;
      }
      ZmqTransport a(options_for("a", setup, keys_a, keys_b)), b(options_for("b", setup, keys_b, keys_a));
      a.connect("b", b.address());
      for (Mode mode : {Mode::borrow, Mode::copy})
        record(curve, mode == Mode::borrow ? "borrow" : "copy",
               time_transfer(a, b, values, destination, mode, false, repeats),
               time_transfer(a, b, values, destination, mode, true, repeats));
    }
    out["sizes"].push_back(size_entry);
  }
  out["repeats"] = repeats;
  out["socket_buffer"] = socket_buffer;
  out["io_threads"] = io_threads;
  out["fresh_heap"] = fresh_heap;
  out["processes"] = two_processes ? 2 : 1;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
