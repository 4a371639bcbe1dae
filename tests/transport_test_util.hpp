// Helpers of tests/test_transport.cpp: endpoint pairs of each transport kind, value
// checks per dtype, a child peer process to kill, and the hostile-message generator.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "base/log.hpp"
#include "base/rng.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "gossip/network/wire/payload.hpp"

extern char** environ;

namespace hearsay::transport::testing {

using namespace std::chrono_literals;
using wire::Dtype;
using wire::MessageType;

// Generous: only a hang should ever reach it.
inline Deadline soon() { return Clock::now() + 30s; }

// Whether a ping's round trip was measured: longer than nothing (a real exchange on a real
// clock takes time) and shorter than the 30 s a test gives it.
inline bool measured_round_trip(Clock::duration rtt) { return rtt > Clock::duration::zero() && rtt < 30s; }

enum class Kind { inproc, tcp, ipc, curve };
inline const char* to_string(Kind k) {
  switch (k) {
    case Kind::inproc:
      return "inproc";
    case Kind::tcp:
      return "tcp";
    case Kind::ipc:
      return "ipc";
    case Kind::curve:
      return "tcp+curve";
  }
  return "?";
}

inline wire::Expectation expectation() { return {"run-t", "mlp-test"}; }

// A header of `type` numbered `step`, as the emulation tests count messages by it.
inline wire::Header step_header(MessageType type, std::uint64_t step) {
  wire::Header h;
  h.type = type;
  h.step = step;
  return h;
}

// A params_push of `floats` values (4 bytes each) numbered `step`.
inline void push(Transport& from, const std::string& to, std::uint64_t step, std::size_t floats) {
  from.send(to, step_header(MessageType::params_push, step),
            Payload::copy_f32(std::vector<float>(floats, 0.5f)));
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The messages of steps 1 and 2, push()ed to a receiver at `sent`, and how long after
// `sent` each came.
struct TwoArrivals {
  std::optional<Message> first, second;
  double first_s = 0, second_s = 0;
};
// Receives them, each within 5 s, and checks they came in order.
inline TwoArrivals receive_two_in_order(Transport& receiver, Clock::time_point sent) {
  TwoArrivals got;
  got.first = receiver.receive(sent + 5s);
  REQUIRE(got.first);
  got.first_s = seconds_since(sent);
  got.second = receiver.receive(sent + 5s);
  REQUIRE(got.second);
  got.second_s = seconds_since(sent);
  CHECK(got.first->header().step == 1);
  CHECK(got.second->header().step == 2);
  return got;
}

inline transport::AuthorizedKeys authorize(const std::vector<std::string>& keys) {
  transport::AuthorizedKeys authorized;
  for (std::size_t i = 0; i < keys.size(); ++i) authorized.name_by_key[keys[i]] = "peer" + std::to_string(i);
  return authorized;
}

inline InprocOptions inproc_options(const std::string& id) {
  InprocOptions o;
  o.id = id;
  o.expect = expectation();
  return o;
}

// Insecure for tcp/ipc; for curve, fresh keys that authorize nobody (callers fill in).
inline ZmqOptions zmq_options(const std::string& id, Kind kind, std::string bind = "") {
  ZmqOptions o;
  o.id = id;
  o.expect = expectation();
  // An explicit path: "ipc://*" would put the socket's directory in the working directory.
  const std::string ipc = "ipc:///tmp/hearsay-test-" + std::to_string(getpid()) + "-" + id + ".sock";
  o.bind = !bind.empty() ? bind : kind == Kind::ipc ? ipc : "tcp://127.0.0.1:*";
  o.linger = 0ms;
  if (kind == Kind::curve) {
    o.security.keypair = transport::generate_curve_keypair();
    o.security.authorized = authorize({});
  } else {
    o.security.insecure = true;
  }
  return o;
}

struct Endpoints {
  std::shared_ptr<InprocFabric> fabric;
  std::unique_ptr<Transport> a, b;
  transport::CurveKeyPair keys_a, keys_b;
};

// Peers "a" and "b"; a connects to b, and b to a when connect_back.
inline Endpoints make_endpoints(Kind kind, bool connect_back = true) {
  logging::CapturedLines quiet(logging::Level::off);  // the insecure-mode warnings
  Endpoints e;
  if (kind == Kind::inproc) {
    e.fabric = InprocFabric::create();
    e.a = std::make_unique<InprocTransport>(e.fabric, inproc_options("a"));
    e.b = std::make_unique<InprocTransport>(e.fabric, inproc_options("b"));
  } else {
    ZmqOptions oa = zmq_options("a", kind), ob = zmq_options("b", kind);
    if (kind == Kind::curve) {
      e.keys_a = *oa.security.keypair;
      e.keys_b = *ob.security.keypair;
      oa.security.authorized = authorize({e.keys_b.public_z85});
      ob.security.authorized = authorize({e.keys_a.public_z85});
    }
    e.a = std::make_unique<ZmqTransport>(oa);
    e.b = std::make_unique<ZmqTransport>(ob);
  }
  e.a->connect("b", e.b->address());
  if (connect_back) e.b->connect("a", e.a->address());
  return e;
}

inline std::vector<float> random_values(Rng& rng, std::size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// The rounding bounds of each dtype: f32 is exact; f16 relative 2^-11 (round to nearest
// of an 11-bit significand) plus half its smallest subnormal 2^-25 for the values of
// N(0,1) that fall below f16's normal range; bf16 relative 2^-8 (its exponent range is
// f32's); int8 absolute scale/2 per chunk, scale = max|x|/127, with 1e-6 relative slack
// for the f32 division and multiplication that compute q and its decoded value.
inline void require_within_rounding(wire::Dtype dtype, const std::vector<float>& x,
                                    const std::vector<float>& y) {
  REQUIRE(x.size() == y.size());
  std::vector<double> chunk_max((x.size() + wire::kInt8Chunk - 1) / wire::kInt8Chunk, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i)
    chunk_max[i / wire::kInt8Chunk] =
        std::max(chunk_max[i / wire::kInt8Chunk], std::abs(static_cast<double>(x[i])));
  std::size_t bad = x.size();
  for (std::size_t i = 0; i < x.size() && bad == x.size(); ++i) {
    const double err = std::abs(static_cast<double>(x[i]) - y[i]);
    double bound = 0;
    switch (dtype) {
      case wire::Dtype::f32:
        bound = 0;
        break;
      case wire::Dtype::f16:
        bound = std::ldexp(std::abs(x[i]), -11) + std::ldexp(1.0, -25);
        break;
      case wire::Dtype::bf16:
        bound = std::ldexp(std::abs(x[i]), -8);
        break;
      case wire::Dtype::int8: {
        const double max_abs = chunk_max[i / wire::kInt8Chunk];
        bound = max_abs / 127 / 2 + 1e-6 * max_abs;
        break;
      }
      default:
        FAIL("no bound for this dtype");
    }
    if (!(err <= bound)) bad = i;
  }
  INFO("first value outside the bound at " << bad << ": " << (bad < x.size() ? x[bad] : 0.0f)
                                           << " came back as " << (bad < y.size() ? y[bad] : 0.0f));
  REQUIRE(bad == x.size());
}

// A header that passes admission at a receiver with expectation(), from `sender`.
inline wire::Header valid_header(const std::string& sender, wire::MessageType type) {
  wire::Header h;
  h.run_id = expectation().run_id;
  h.fingerprint = expectation().fingerprint;
  h.sender = sender;
  h.type = type;
  return h;
}

inline std::vector<std::uint8_t> bytes_of(std::span<const float> v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
  return {p, p + v.size_bytes()};
}

// [header][payload] of a params_push carrying `payload` with the right checksum.
inline std::vector<std::vector<std::uint8_t>> push_frames(const std::string& sender, wire::Dtype dtype,
                                                          std::uint64_t count,
                                                          std::vector<std::uint8_t> payload) {
  wire::Header h = valid_header(sender, wire::MessageType::params_push);
  h.dtype = dtype;
  h.count = count;
  h.checksum = wire::checksum(payload);
  return {wire::encode_header(h), std::move(payload)};
}

inline std::vector<std::vector<std::uint8_t>> nan_push(const std::string& sender) {
  std::vector<float> v{1.0f, std::nanf(""), 2.0f};
  return push_frames(sender, wire::Dtype::f32, v.size(), bytes_of(v));
}

// Replies to every params_pull with 16 values until a call throws.
inline void serve_pulls(Transport& t) {
  for (;;) {
    auto m = t.receive(Clock::now() + 500ms);
    if (!m || m->type() != wire::MessageType::params_pull) continue;
    wire::Header reply;
    reply.type = wire::MessageType::params_reply;
    reply.nonce = m->header().nonce;
    t.send(m->sender(), reply, Payload::copy_f32(std::vector<float>(16, 0.25f)));
  }
}

// Waits for the PeerError about `peer`, which must arrive before `deadline`.
inline void require_peer_error(Transport& t, const std::string& peer, const std::string& address,
                               PeerFailure failure, Deadline deadline) {
  bool thrown = false;
  try {
    while (Clock::now() < deadline) (void)t.receive(deadline);
  } catch (const PeerError& e) {
    thrown = true;
    INFO(e.what());
    CHECK(e.peer_id() == peer);
    CHECK(e.address() == address);
    CHECK(e.failure() == failure);
    CHECK_THAT(e.what(), Catch::Contains("'" + peer + "'") && Catch::Contains(address));
  }
  REQUIRE(thrown);
  // Before the deadline, give or take the wake-up itself.
  REQUIRE(Clock::now() < deadline + 5s);
}

inline bool log_has(const logging::CapturedLines& log, const std::string& text) {
  for (const auto& line : log.lines())
    if (line.message.find(text) != std::string::npos) return true;
  return false;
}

// A ping from a raw DEALER; true when the pong with this nonce came back in time. With
// resend_every, the ping goes out again at that interval (for a connection that
// ZeroMQ may have dropped, taking queued messages with it).
inline bool raw_ping(zmq::socket_t& raw, const std::string& sender, std::uint64_t nonce, Deadline deadline,
                     std::chrono::milliseconds resend_every = 0ms) {
  wire::Header ping = valid_header(sender, wire::MessageType::ping);
  ping.nonce = nonce;
  const auto bytes = wire::encode_header(ping);
  Deadline next_send = Clock::now();
  while (Clock::now() < deadline) {
    if (Clock::now() >= next_send) {
      raw.send(zmq::buffer(bytes), zmq::send_flags::none);
      next_send = resend_every > 0ms ? Clock::now() + resend_every : deadline;
    }
    zmq::pollitem_t item{raw.handle(), 0, ZMQ_POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline, next_send) - Clock::now());
    if (zmq::poll(&item, 1, std::max(left, 1ms)) == 0) continue;
    zmq::message_t frame;
    if (!raw.recv(frame)) continue;
    const bool single = !frame.more();
    while (frame.more()) (void)raw.recv(frame);
    if (!single) continue;
    auto decoded = wire::decode_header({static_cast<const std::uint8_t*>(frame.data()), frame.size()});
    if (decoded.header && decoded.header->type == wire::MessageType::pong && decoded.header->nonce == nonce)
      return true;
  }
  return false;
}

// What send_flood sent, per kind of damage.
struct FloodTally {
  std::uint64_t total = 0, valid = 0, non_finite = 0, bad_checksum = 0, too_large = 0, wrong_frames = 0,
                truncated = 0, giant = 0, spoofed = 0;
};

// A ZeroMQ peer in a child process (this test binary re-executed), killed at will.
class ChildPeer {
 public:
  static ChildPeer spawn(const std::string& id);
  ChildPeer(ChildPeer&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), address_(std::move(other.address_)) {}
  ~ChildPeer() { kill(); }
  const std::string& address() const { return address_; }
  void kill();

 private:
  ChildPeer() = default;
  pid_t pid_ = -1;
  std::string address_;
};

// A flood of hostile messages: random bytes, mutated and corrupted headers, wrong frame counts,
// truncated payloads, bad checksums, non-finite values, giant counts, oversized headers
// and valid messages, in random order from a seeded Rng.
inline FloodTally send_flood(zmq::socket_t& raw, Rng& rng, std::uint64_t messages) {
  FloodTally t;
  const std::string me = "flood";
  auto send_frames = [&](const std::vector<std::vector<std::uint8_t>>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i)
      raw.send(zmq::buffer(frames[i]),
               i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    ++t.total;
  };
  auto random_bytes = [&](std::size_t n) {
    std::vector<std::uint8_t> b(n);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng.next_u64());
    return b;
  };
  auto small_push = [&](std::size_t n) {
    const auto v = random_values(rng, n);
    return push_frames(me, Dtype::f32, n, bytes_of(v));
  };
  for (std::uint64_t i = 0; i < messages; ++i) {
    switch (rng.below(10)) {
      case 0:  // random bytes as a header
        send_frames({random_bytes(rng.below(300))});
        break;
      case 1: {  // a valid ping with 1 to 3 bytes flipped: any outcome, even still valid
        wire::Header h = valid_header(me, MessageType::ping);
        h.step = rng.next_u64();
        auto bytes = wire::encode_header(h);
        for (auto k = rng.below(3) + 1; k > 0; --k)
          bytes[rng.below(bytes.size())] ^= static_cast<std::uint8_t>(rng.below(255) + 1);
        send_frames({bytes});
        break;
      }
      case 2: {  // one field wrong
        wire::Header h = valid_header(me, MessageType::ping);
        switch (rng.below(6)) {
          case 0:
            h.run_id = "another-run";
            break;
          case 1:
            h.fingerprint = "another-model";
            break;
          case 2:
            h.version = 2;
            break;
          case 3:
            h.type = static_cast<MessageType>(99);
            break;
          case 4:
            h.sender = "somebody-else";
            ++t.spoofed;
            break;
          default:
            h.type = MessageType::params_push;
            h.dtype = static_cast<Dtype>(9);
            h.count = 1;
        }
        send_frames({wire::encode_header(h)});
        break;
      }
      case 3: {  // wrong frame counts
        ++t.wrong_frames;
        auto push = small_push(4);
        switch (rng.below(3)) {
          case 0:
            send_frames({wire::encode_header(valid_header(me, MessageType::ping)), {1, 2, 3}});
            break;
          case 1:
            send_frames({push[0], push[1], random_bytes(8)});
            break;
          default:
            send_frames({push[0]});
        }
        break;
      }
      case 4: {  // truncated payload
        ++t.truncated;
        auto push = small_push(64);
        push[1].resize(rng.below(push[1].size()));
        send_frames(push);
        break;
      }
      case 5: {  // bad checksum
        ++t.bad_checksum;
        const auto v = random_values(rng, 32);
        wire::Header h = valid_header(me, MessageType::params_push);
        h.dtype = Dtype::f32;
        h.count = v.size();
        h.checksum = wire::checksum(bytes_of(v)) ^ (rng.next_u64() | 1);
        send_frames({wire::encode_header(h), bytes_of(v)});
        break;
      }
      case 6: {  // non-finite values with a correct checksum, in three dtypes
        ++t.non_finite;
        switch (rng.below(3)) {
          case 0:
            send_frames(nan_push(me));
            break;
          case 1:
            send_frames(push_frames(me, Dtype::f16, 2, {0x00, 0x3c, 0x00, 0x7c}));
            break;  // 1.0, +inf
          default: {
            // 3 int8 values, one scale, its block's length - 1 (2), the block count (1).
            std::vector<std::uint8_t> payload = {1, 1, 1, 0, 0, 0, 0, 2, 1, 0, 0, 0};
            const float nan = std::nanf("");
            std::memcpy(payload.data() + 3, &nan, 4);
            send_frames(push_frames(me, Dtype::int8, 3, payload));
          }
        }
        break;
      }
      case 7: {  // giant announced count over a small payload
        ++t.giant;
        const std::uint64_t counts[] = {wire::kMaxElements, wire::kMaxElements + 1, std::uint64_t{1} << 40,
                                        ~std::uint64_t{0}};
        auto payload = random_bytes(16);
        send_frames(push_frames(me, Dtype::f32, counts[rng.below(4)], payload));
        break;
      }
      case 8:  // header frame above the bound
        ++t.too_large;
        send_frames({random_bytes(wire::kMaxHeaderBytes + 1 + rng.below(8192))});
        break;
      default:  // valid
        ++t.valid;
        send_frames(small_push(8));
    }
  }
  return t;
}

inline constexpr const char* kChildFdVar = "HEARSAY_TRANSPORT_CHILD_FD";
inline constexpr const char* kChildIdVar = "HEARSAY_TRANSPORT_CHILD_ID";

inline ChildPeer ChildPeer::spawn(const std::string& id) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls are allowed in a multi-threaded process.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("HEARSAY_LOG=") && !entry.starts_with("HEARSAY_TRANSPORT_CHILD"))
      env.emplace_back(entry);
  }
  env.push_back(std::string(kChildFdVar) + "=" + std::to_string(fds[1]));
  env.push_back(std::string(kChildIdVar) + "=" + id);
  env.push_back("HEARSAY_LOG=error");
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char exe[4096] = {};
  REQUIRE(readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0);
  std::string test_name = "transport child peer process";
  char* argv[] = {exe, test_name.data(), nullptr};
  const int devnull = open("/dev/null", O_WRONLY);
  REQUIRE(devnull >= 0);

  ChildPeer child;
  child.pid_ = fork();
  if (child.pid_ == 0) {
    dup2(devnull, STDOUT_FILENO);
    close(fds[0]);
    execve(exe, argv, envp.data());
    _exit(127);
  }
  close(devnull);
  close(fds[1]);
  REQUIRE(child.pid_ > 0);
  std::string line;
  const auto deadline = soon();
  while (line.find('\n') == std::string::npos && Clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, left.count()))) <= 0) continue;
    char buffer[256];
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;  // the child died before telling its address
    line.append(buffer, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  REQUIRE(line.find('\n') != std::string::npos);
  child.address_ = line.substr(0, line.find('\n'));
  return child;
}

inline void ChildPeer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

// The child's side: when spawned by ChildPeer, serve params_pull until killed.
inline void run_child_peer_if_spawned() {
  const char* fd_text = std::getenv(kChildFdVar);
  const char* id = std::getenv(kChildIdVar);
  if (fd_text == nullptr || id == nullptr) return;  // run by hand: nothing to do
  const int fd = std::atoi(fd_text);
  ZmqTransport peer(zmq_options(id, Kind::tcp));
  const std::string line = peer.address() + "\n";
  const bool told = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (!told) return;
  // Serve until killed; stop by ourselves if the parent test process is gone.
  const pid_t parent = getppid();
  while (getppid() == parent) {
    auto m = peer.receive(Clock::now() + 500ms);
    if (!m || m->type() != MessageType::params_pull) continue;
    wire::Header reply;
    reply.type = MessageType::params_reply;
    reply.nonce = m->header().nonce;
    peer.send(m->sender(), reply, Payload::copy_f32(std::vector<float>(16, 0.25f)));
  }
}

}  // namespace hearsay::transport::testing
