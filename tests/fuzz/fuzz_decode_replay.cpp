// Runs the fuzz target's pipeline without libFuzzer, so every compiler (and every CI
// run, through ctest) exercises it: first over the seed corpus, then over inputs made
// by mutating the seeds with a seeded RNG. A broken property traps (non-zero exit).
//
//   fuzz_decode_replay tests/fuzz/corpus --mutations 20000 --seed 1
//   fuzz_decode_replay --write-corpus tests/fuzz/corpus   # regenerate the seeds
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gossip/network/wire/header.hpp"
#include "gossip/network/wire/payload.hpp"
#include "receive_pipeline.hpp"

namespace fs = std::filesystem;
using namespace hearsay::wire;
using Bytes = std::vector<std::uint8_t>;

namespace {

Header base(MessageType t, bool fixed_run) {
  Header h;
  h.run_id = fixed_run ? fuzz::kFuzzRun : "run-7";
  h.fingerprint = fixed_run ? fuzz::kFuzzModel : "mlp-235146-5f0c3a9e12b47d68";
  h.sender = "peer0";
  h.type = t;
  h.step = 42;
  h.nonce = 9;
  return h;
}

Bytes with_payload(Header h, Dtype d, std::size_t n, bool fixed_run = false) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 13) * 0.25f - 1.5f;
  Bytes payload(*payload_bytes(d, n));
  encode_values(d, values, payload);
  h.dtype = d;
  h.count = n;
  h.checksum = checksum(payload);
  return fuzz::join_frames({encode_header(h), payload}, !fixed_run);
}

// Real messages of every shape the pipeline accepts, as encoded by this code.
std::vector<std::pair<std::string, Bytes>> seed_inputs() {
  std::vector<std::pair<std::string, Bytes>> seeds;
  seeds.emplace_back("ping", fuzz::join_frames({encode_header(base(MessageType::ping, false))}, true));
  seeds.emplace_back("pong-fixed-run",
                     fuzz::join_frames({encode_header(base(MessageType::pong, true))}, false));
  Header hello = base(MessageType::hello, false);
  hello.address = "tcp://127.0.0.1:5555";
  seeds.emplace_back("hello", fuzz::join_frames({encode_header(hello)}, true));
  Header welcome = base(MessageType::welcome, false);
  welcome.members = {"peer0=tcp://127.0.0.1:5555", "peer1=ipc:///tmp/peer1"};
  seeds.emplace_back("welcome", fuzz::join_frames({encode_header(welcome)}, true));
  seeds.emplace_back("params-push-f32", with_payload(base(MessageType::params_push, false), Dtype::f32, 4));
  seeds.emplace_back("params-reply-f16",
                     with_payload(base(MessageType::params_reply, false), Dtype::f16, 33));
  seeds.emplace_back("params-push-bf16-fixed-run",
                     with_payload(base(MessageType::params_push, true), Dtype::bf16, 17, true));
  seeds.emplace_back("params-push-int8",
                     with_payload(base(MessageType::params_push, false), Dtype::int8, 300));
  Header share = base(MessageType::pushsum_share, false);
  share.weight = 0.25;
  seeds.emplace_back("pushsum-share", with_payload(share, Dtype::f32, 8));
  Header chunk = base(MessageType::allreduce_chunk, false);
  chunk.offset = 1024;
  seeds.emplace_back("allreduce-chunk", with_payload(chunk, Dtype::f32, 16));
  Header state = base(MessageType::state_reply, false);
  state.parts = {6, 4};
  seeds.emplace_back("state-reply", with_payload(state, Dtype::f32, 10));
  return seeds;
}

Bytes mutate(const Bytes& input, const std::vector<Bytes>& seeds, std::mt19937_64& rng) {
  Bytes out = input;
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); };
  const std::uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1,
                                      0xcf, 0xd3, 0xdd, 0xdf, 0xdb, 0x7c, 0x7f};
  const int edits = 1 + static_cast<int>(rng() % 6);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:
        if (!out.empty()) out[pick(out.size())] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!out.empty()) out[pick(out.size())] = interesting[pick(std::size(interesting))];
        break;
      case 2:
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(pick(out.size() + 1)),
                   static_cast<std::uint8_t>(rng()));
        break;
      case 3:
        if (!out.empty()) {
          const std::size_t at = pick(out.size());
          const std::size_t len = 1 + pick(std::min<std::size_t>(8, out.size() - at));
          out.erase(out.begin() + static_cast<std::ptrdiff_t>(at),
                    out.begin() + static_cast<std::ptrdiff_t>(at + len));
        }
        break;
      case 4:
        out.resize(pick(out.size() + 1));
        break;
      case 5: {  // splice the tail of another seed
        const Bytes& other = seeds[pick(seeds.size())];
        const std::size_t from = pick(other.size());
        out.resize(pick(out.size() + 1));
        out.insert(out.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      case 6:
        if (!out.empty()) out[0] = static_cast<std::uint8_t>(rng());  // frame count / expectation
        break;
    }
  }
  return out;
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Replays the wire decoder's fuzz pipeline over a corpus and seeded mutations of it.");
  std::string corpus;
  std::string write_corpus;
  std::uint64_t mutations = 10000;
  std::uint64_t seed = 1;
  app.add_option("corpus", corpus, "Directory of seed inputs (in the fuzz input format)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--mutations", mutations, "Mutated inputs to run after the corpus");
  app.add_option("--seed", seed, "Seed of the mutation RNG");
  app.add_option("--write-corpus", write_corpus,
                 "Write the generated seed inputs into this directory and exit");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!write_corpus.empty()) {
      fs::create_directories(write_corpus);
      for (const auto& [name, bytes] : seed_inputs()) {
        std::ofstream out(fs::path(write_corpus) / name, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        if (!out) throw std::runtime_error("cannot write " + (fs::path(write_corpus) / name).string());
      }
      std::printf("wrote %zu seed inputs to %s\n", seed_inputs().size(), write_corpus.c_str());
      return 0;
    }
    std::vector<Bytes> seeds;
    // Real messages, as this code encodes them: each must be accepted whole.
    for (auto& [name, bytes] : seed_inputs()) {
      if (fuzz::run_receive_pipeline(bytes) != fuzz::Reached::accepted) {
        std::fprintf(stderr, "fuzz_decode_replay: the real message '%s' was not accepted\n", name.c_str());
        return 1;
      }
      seeds.push_back(std::move(bytes));
    }
    if (!corpus.empty())
      for (const auto& entry : fs::directory_iterator(corpus))
        if (entry.is_regular_file()) seeds.push_back(read_file(entry.path()));
    for (const Bytes& input : seeds) fuzz::run_receive_pipeline(input);

    std::mt19937_64 rng(seed);
    std::uint64_t reached[fuzz::kReachedCount] = {};
    for (std::uint64_t i = 0; i < mutations; ++i) {
      const Bytes input = mutate(seeds[rng() % seeds.size()], seeds, rng);
      ++reached[static_cast<int>(fuzz::run_receive_pipeline(input))];
    }
    std::printf("fuzz_decode_replay: %zu corpus inputs and %llu mutations, no property broken; mutations "
                "dropped for their frames %llu, refused by decode_header %llu, by validate %llu, by "
                "check_values %llu, accepted %llu\n",
                seeds.size(), static_cast<unsigned long long>(mutations),
                static_cast<unsigned long long>(reached[0]), static_cast<unsigned long long>(reached[1]),
                static_cast<unsigned long long>(reached[2]), static_cast<unsigned long long>(reached[3]),
                static_cast<unsigned long long>(reached[4]));
  } catch (const std::exception& e) {
    // The pipeline itself must not throw on any input; this is reported as a failure.
    std::fprintf(stderr, "fuzz_decode_replay: %s\n", e.what());
    return 1;
  }
  return 0;
}
