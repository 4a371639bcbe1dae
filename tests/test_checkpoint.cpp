#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/checkpoint.hpp"
#include "model/layers/linear.hpp"
#include "model/zoo.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using hearsay::testing::contains;
using hearsay::testing::read_file;
using hearsay::testing::TempPath;

namespace {

using OrderedJson = nlohmann::ordered_json;

std::vector<float> snapshot(const hearsay::Model& model) {
  const auto p = model.params();
  return {p.begin(), p.end()};
}

void randomize(hearsay::Model& model, std::uint64_t seed) {
  hearsay::Rng rng(seed);
  for (float& p : model.params()) p = static_cast<float>(rng.normal());
}

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A valid-looking safetensors file split into its parts, so tests can break one thing at
// a time and serialize it again (header padded to 8 bytes like the writer does).
struct RawFile {
  OrderedJson header;
  std::string data;

  static RawFile parse(const std::string& bytes) {
    REQUIRE(bytes.size() >= 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
    return {OrderedJson::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  }
  std::string bytes() const {
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
      out[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    return out + text + data;
  }
  // Removes a tensor and its bytes, moving later tensors down so the layout stays valid.
  void drop(const std::string& name) {
    const auto begin = header[name]["data_offsets"][0].get<std::uint64_t>();
    const auto end = header[name]["data_offsets"][1].get<std::uint64_t>();
    header.erase(name);
    data.erase(begin, end - begin);
    for (auto& [key, entry] : header.items()) {
      if (key == "__metadata__") continue;
      auto& offsets = entry["data_offsets"];
      if (offsets[0].get<std::uint64_t>() >= end) {
        offsets[0] = offsets[0].get<std::uint64_t>() - (end - begin);
        offsets[1] = offsets[1].get<std::uint64_t>() - (end - begin);
      }
    }
  }
};

// A checkpoint of lenet with random parameters, SGD-momentum state after three steps,
// and every scalar set to a value that differs from its default.
struct Fixture {
  std::unique_ptr<hearsay::Model> model = hearsay::make_model("lenet");
  std::unique_ptr<hearsay::Optimizer> optimizer =
      hearsay::make_sgd(static_cast<std::size_t>(model->param_count()), {.momentum = 0.9f});
  hearsay::TrainingState state;

  Fixture() {
    randomize(*model, 11);
    hearsay::Rng rng(12);
    for (int s = 0; s < 3; ++s) {
      for (float& g : model->grads()) g = static_cast<float>(rng.normal());
      optimizer->step(model->params(), model->grads(), 0.01f);
    }
    state.step = 1234;
    state.epoch = 3;
    state.epoch_step = 17;
    state.seed = 0xfedcba9876543210ULL;
    state.rng_state = {1, 0xffffffffffffffffULL, 42};
    state.extra = {{"peer", "3"}, {"note", "with \"quotes\" and \xc3\xa9"}};
    hearsay::save_optimizer_state(*optimizer, state);
  }
};

// The message names the file and says what is wrong.
void require_read_fails(const fs::path& file, hearsay::Model& model, const std::string& what) {
  const auto before = snapshot(model);
  try {
    hearsay::read_checkpoint(file, model);
    FAIL("read_checkpoint accepted a bad file (" << what << ")");
  } catch (const std::runtime_error& e) {
    INFO(e.what());
    CHECK(contains(e.what(), file.string()));
    CHECK(contains(e.what(), what));
  }
  CHECK(snapshot(model) == before);
}

bool no_temporary_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (contains(entry.path().filename().string(), ".tmp-")) return false;
  return true;
}

// Lowers the file-size limit so writes beyond `bytes` fail with EFBIG, as on a full disk;
// SIGXFSZ is ignored meanwhile so the process gets the error instead of the signal.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace

TEST_CASE("named parameter tensors tile the flat buffer with PyTorch names and shapes", "[checkpoint]") {
  using Names = std::vector<std::pair<std::string, std::string>>;
  const std::vector<std::pair<std::string, Names>> models = {{"mlp",
                                                              {{"0.weight", "[256,784]"},
                                                               {"0.bias", "[256]"},
                                                               {"2.weight", "[128,256]"},
                                                               {"2.bias", "[128]"},
                                                               {"4.weight", "[10,128]"},
                                                               {"4.bias", "[10]"}}},
                                                             {"lenet",
                                                              {{"0.weight", "[20,1,3,3]"},
                                                               {"0.bias", "[20]"},
                                                               {"3.weight", "[50,20,5,5]"},
                                                               {"3.bias", "[50]"},
                                                               {"7.weight", "[128,800]"},
                                                               {"7.bias", "[128]"},
                                                               {"9.weight", "[10,128]"},
                                                               {"9.bias", "[10]"}}}};
  for (const auto& [name, expected] : models) {
    INFO(name);
    const auto model = hearsay::make_model(name);
    const auto& tensors = model->named_params();
    REQUIRE(tensors.size() == expected.size());
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      CHECK(tensors[i].name == expected[i].first);
      CHECK(tensors[i].shape.str() == expected[i].second);
      CHECK(tensors[i].offset == offset);
      offset += tensors[i].shape.numel();
    }
    CHECK(offset == model->param_count());
  }
}

TEST_CASE("a Linear weight tensor is [out, in]: element [o][i] connects input i to output o",
          "[checkpoint]") {
  std::vector<std::unique_ptr<hearsay::Layer>> layers;
  layers.push_back(std::make_unique<hearsay::Linear>(3, 2));
  hearsay::Model model("probe", hearsay::Shape{3}, 2, std::move(layers));
  const auto& weight = model.named_params().at(0);
  REQUIRE(weight.shape.str() == "[2,3]");
  std::fill(model.params().begin(), model.params().end(), 0.0f);
  model.params()[static_cast<std::size_t>(weight.offset + 1 * 3 + 2)] = 1.0f;  // [1][2]
  hearsay::Workspace ws(model, 1);
  const float x[3] = {0.0f, 0.0f, 5.0f};
  const auto y = ws.forward(x, 1, hearsay::Pass::eval);
  CHECK(y.data[0] == 0.0f);
  CHECK(y.data[1] == 5.0f);
}

TEST_CASE("a lenet checkpoint round-trips bit-exactly and resumes the optimizer exactly", "[checkpoint]") {
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  const fs::path file = hearsay::checkpoint_path(dir.path());
  CHECK(file.filename() == "checkpoint.safetensors");
  hearsay::write_checkpoint(file, *f.model, f.state);
  CHECK(no_temporary_files(dir.path()));

  // Data starts 8-byte aligned.
  const std::string bytes = read_file(file);
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i)
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  CHECK((8 + header_bytes) % 8 == 0);
  // The model file holds the model only (PyTorch's strict load takes it as it is); the
  // optimizer state is in the file it names, beside it.
  CHECK(bytes.size() == 8 + header_bytes + f.model->param_count() * 4);
  const RawFile model_file = RawFile::parse(bytes);
  CHECK(model_file.header["__metadata__"]["hearsay.optimizer_file"] == "checkpoint.optimizer-1234.safetensors");
  const fs::path optimizer_file = dir.path() / "checkpoint.optimizer-1234.safetensors";
  const RawFile optimizer_raw = RawFile::parse(read_file(optimizer_file));
  CHECK(optimizer_raw.header["state"]["shape"][0] == f.state.optimizer_state.size());
  CHECK(optimizer_raw.data.size() == f.state.optimizer_state.size() * 4);

  auto restored = hearsay::make_model("lenet");
  randomize(*restored, 99);
  const hearsay::TrainingState s = hearsay::read_checkpoint(file, *restored);
  REQUIRE(restored->param_count() == f.model->param_count());
  CHECK(std::memcmp(restored->params().data(), f.model->params().data(), f.model->params().size_bytes()) ==
        0);
  CHECK(s.fingerprint == f.model->fingerprint());
  CHECK(s.model == "lenet");
  CHECK(s.step == f.state.step);
  CHECK(s.epoch == f.state.epoch);
  CHECK(s.epoch_step == f.state.epoch_step);
  CHECK(s.seed == f.state.seed);
  CHECK(s.rng_state == f.state.rng_state);
  CHECK(s.optimizer == "sgd");
  CHECK(s.optimizer_steps == 3);
  CHECK(s.extra == f.state.extra);
  REQUIRE(s.optimizer_state.size() == f.state.optimizer_state.size());
  CHECK(std::memcmp(s.optimizer_state.data(), f.state.optimizer_state.data(), s.optimizer_state.size() * 4) ==
        0);

  // One more step from the original and from the restored copy gives the same bits.
  auto optimizer = hearsay::make_sgd(static_cast<std::size_t>(restored->param_count()), {.momentum = 0.9f});
  hearsay::restore_optimizer_state(s, *optimizer);
  CHECK(optimizer->steps_taken() == 3);
  hearsay::Rng rng(13);
  for (float& g : f.model->grads()) g = static_cast<float>(rng.normal());
  std::copy(f.model->grads().begin(), f.model->grads().end(), restored->grads().begin());
  f.optimizer->step(f.model->params(), f.model->grads(), 0.01f);
  optimizer->step(restored->params(), restored->grads(), 0.01f);
  CHECK(std::memcmp(restored->params().data(), f.model->params().data(), f.model->params().size_bytes()) ==
        0);

  // Another optimizer's state is refused by name.
  auto adamw = hearsay::make_adamw(static_cast<std::size_t>(restored->param_count()), {});
  CHECK_THROWS_WITH(hearsay::restore_optimizer_state(s, *adamw),
                    Catch::Contains("sgd") && Catch::Contains("adamw"));
}

TEST_CASE("a state with reserved metadata keys or another model's fingerprint is not written",
          "[checkpoint]") {
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  hearsay::TrainingState s = f.state;
  s.extra["hearsay.step"] = "1";
  CHECK_THROWS_AS(hearsay::write_checkpoint(dir.path() / "c", *f.model, s), std::invalid_argument);
  s = f.state;
  s.fingerprint = hearsay::make_model("mlp")->fingerprint();
  CHECK_THROWS_AS(hearsay::write_checkpoint(dir.path() / "c", *f.model, s), std::invalid_argument);
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("a failing checkpoint write leaves the previous checkpoint intact and no temporary file",
          "[checkpoint]") {
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  const fs::path file = dir.path() / "checkpoint.safetensors";
  hearsay::write_checkpoint(file, *f.model, f.state);
  const std::string old_bytes = read_file(file);

  // A newer state, so a write that got through would change the file.
  hearsay::TrainingState newer = f.state;
  newer.step += 1;
  randomize(*f.model, 77);

  bool replaced = false;  // only the successful write may change the file
  SECTION("a successful write replaces the file") {
    hearsay::write_checkpoint(file, *f.model, newer);
    replaced = true;
    CHECK(read_file(file) != old_bytes);
    CHECK(no_temporary_files(dir.path()));
  }
  SECTION("the directory does not exist") {
    const fs::path missing = dir.path() / "no-such-dir" / "checkpoint.safetensors";
    CHECK_THROWS_WITH(hearsay::write_checkpoint(missing, *f.model, newer), Catch::Contains(missing.string()));
  }
  SECTION("the disk fills up mid-write") {
    {
      FileSizeLimit limit(static_cast<rlim_t>(old_bytes.size() / 2));
      CHECK_THROWS_WITH(hearsay::write_checkpoint(file, *f.model, newer),
                        Catch::Contains(file.string()) && Catch::Contains("File too large"));
    }
  }
  SECTION("the target is a directory, so the final rename fails") {
    const fs::path blocked = dir.path() / "blocked";
    fs::create_directories(blocked / "inside");
    CHECK_THROWS_WITH(hearsay::write_checkpoint(blocked, *f.model, newer), Catch::Contains(blocked.string()));
    CHECK(fs::is_directory(blocked / "inside"));
  }
  SECTION("the directory is read-only") {
    if (::geteuid() == 0) {
      // Root writes through permissions, but not into /proc/self, where no one creates a file.
      const fs::path unwritable = fs::path("/proc/self") / "checkpoint.safetensors";
      CHECK_THROWS_WITH(hearsay::write_checkpoint(unwritable, *f.model, newer),
                        Catch::Contains(unwritable.string()));
      CHECK_FALSE(fs::exists(unwritable));
    } else {
      fs::permissions(dir.path(), fs::perms::owner_write, fs::perm_options::remove);
      CHECK_THROWS_WITH(hearsay::write_checkpoint(file, *f.model, newer), Catch::Contains(file.string()));
      fs::permissions(dir.path(), fs::perms::owner_write, fs::perm_options::add);
    }
  }
  if (replaced) {
    auto check = hearsay::make_model("lenet");
    CHECK(hearsay::read_checkpoint(file, *check).step == newer.step);
  } else {
    CHECK(read_file(file) == old_bytes);
  }
  CHECK(no_temporary_files(dir.path()));
}

TEST_CASE("damaged or foreign checkpoint files are refused with the file named, the model untouched",
          "[checkpoint]") {
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  const fs::path good = dir.path() / "good.safetensors";
  hearsay::write_checkpoint(good, *f.model, f.state);
  const std::string bytes = read_file(good);
  const fs::path bad = dir.path() / "bad.safetensors";
  auto target = hearsay::make_model("lenet");
  randomize(*target, 5);

  SECTION("truncated at several lengths") {
    const RawFile raw = RawFile::parse(bytes);
    const std::size_t data_start = bytes.size() - raw.data.size();
    const std::vector<std::pair<std::size_t, std::string>> cuts = {
        {0, "truncated"},
        {5, "truncated"},
        {8, "runs past the end"},
        {data_start / 2, "runs past the end"},
        {data_start, "beyond the data section"},
        {data_start + 100, "beyond the data section"},
        {bytes.size() - 1, "beyond the data section"}};
    for (const auto& [length, what] : cuts) {
      INFO("cut at " << length);
      write_bytes(bad, bytes.substr(0, length));
      require_read_fails(bad, *target, what);
    }
  }
  SECTION("garbage") {
    std::string garbage;
    hearsay::Rng rng(3);
    for (int i = 0; i < 4096; ++i) garbage += static_cast<char>(rng.below(256));
    write_bytes(bad, garbage);
    require_read_fails(bad, *target, "not a safetensors file");
    // Plausible header lengths in front of a header that is not JSON, or not an object.
    for (const std::string header : {"{\"__metadata__\": oops}", "[1, 2, 3]"}) {
      std::string length(8, '\0');
      length[0] = static_cast<char>(header.size());
      write_bytes(bad, length + header + std::string(2000, 'x'));
      require_read_fails(bad, *target, "not a safetensors file");
    }
  }
  SECTION("a header length larger than the file") {
    std::string lying = bytes;
    const std::uint64_t n = bytes.size();
    for (int i = 0; i < 8; ++i) lying[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    write_bytes(bad, lying);
    require_read_fails(bad, *target, "runs past the end");
  }
  SECTION("a header that is not JSON") {
    RawFile raw = RawFile::parse(bytes);
    std::string broken = raw.bytes();
    broken[9] = '!';  // the first character after '{'
    write_bytes(bad, broken);
    require_read_fails(bad, *target, "not valid JSON");
  }
  SECTION("a missing tensor") {
    RawFile raw = RawFile::parse(bytes);
    raw.drop("7.bias");
    write_bytes(bad, raw.bytes());
    require_read_fails(bad, *target, "missing tensor '7.bias'");
  }
  SECTION("a wrong shape with the right element count") {
    RawFile raw = RawFile::parse(bytes);
    raw.header["0.weight"]["shape"] = {20, 9};
    write_bytes(bad, raw.bytes());
    require_read_fails(bad, *target, "'0.weight' has shape [20,9]");
  }
  SECTION("a wrong dtype") {
    RawFile raw = RawFile::parse(bytes);
    raw.header["3.bias"]["dtype"] = "I32";
    write_bytes(bad, raw.bytes());
    require_read_fails(bad, *target, "dtype I32");
  }
  SECTION("out-of-bounds offsets") {
    RawFile raw = RawFile::parse(bytes);
    const auto size = raw.data.size();
    raw.header["7.bias"]["data_offsets"] = {size, size + 40};
    write_bytes(bad, raw.bytes());
    require_read_fails(bad, *target, "beyond the data section");
  }
  SECTION("overlapping offsets") {
    RawFile raw = RawFile::parse(bytes);
    raw.header["0.bias"]["data_offsets"] = {0, 80};
    write_bytes(bad, raw.bytes());
    require_read_fails(bad, *target, "overlap");
  }
  SECTION("a duplicated tensor name") {
    RawFile raw = RawFile::parse(bytes);
    std::string text = raw.header.dump();
    const std::string entry = ",\"0.bias\":" + raw.header["0.bias"].dump();
    text.insert(text.size() - 1, entry);
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string length(8, '\0');
    for (int i = 0; i < 8; ++i)
      length[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    write_bytes(bad, length + text + raw.data);
    require_read_fails(bad, *target, "names '0.bias' twice");
  }
  SECTION("another model's checkpoint") {
    auto mlp = hearsay::make_model("mlp");
    hearsay::write_checkpoint(bad, *mlp, {});
    require_read_fails(bad, *target, mlp->fingerprint());
    require_read_fails(bad, *target, target->fingerprint());
  }
  SECTION("a fingerprint edited to another model's") {
    RawFile raw = RawFile::parse(bytes);
    raw.header["__metadata__"]["hearsay.fingerprint"] = "lenet-129068-0000000000000000";
    write_bytes(bad, raw.bytes());
    require_read_fails(bad, *target, "written for model lenet-129068-0000000000000000");
  }
  SECTION("a missing file") { require_read_fails(dir.path() / "absent.safetensors", *target, "cannot open"); }
}

TEST_CASE("the optimizer state's file: named by step, older ones removed, checked on reading",
          "[checkpoint]") {
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  const fs::path file = hearsay::checkpoint_path(dir.path());
  hearsay::write_checkpoint(file, *f.model, f.state);
  const fs::path first = dir.path() / "checkpoint.optimizer-1234.safetensors";
  REQUIRE(fs::exists(first));

  SECTION("a crash after the optimizer file of the next checkpoint leaves the previous pair whole") {
    // What the next write does first, then dies: its step's optimizer file, with other values.
    hearsay::TrainingState later = f.state;
    later.step = 1300;
    for (float& v : later.optimizer_state) v += 1.0f;
    TempPath other;
    fs::create_directories(other.path());
    hearsay::write_checkpoint(hearsay::checkpoint_path(other.path()), *f.model, later);
    fs::copy_file(other.path() / "checkpoint.optimizer-1300.safetensors",
                  dir.path() / "checkpoint.optimizer-1300.safetensors");
    auto restored = hearsay::make_model("lenet");
    const auto s = hearsay::read_checkpoint(file, *restored);
    CHECK(s.step == 1234);
    CHECK(s.optimizer_state == f.state.optimizer_state);
    // The next complete write keeps only its own.
    hearsay::write_checkpoint(file, *f.model, later);
    CHECK_FALSE(fs::exists(first));
    CHECK(fs::exists(dir.path() / "checkpoint.optimizer-1300.safetensors"));
    CHECK(hearsay::read_checkpoint(file, *restored).optimizer_state == later.optimizer_state);
  }
  SECTION("a state without optimizer state writes no optimizer file and removes the old one") {
    hearsay::TrainingState bare = f.state;
    bare.optimizer_state.clear();
    hearsay::write_checkpoint(file, *f.model, bare);
    CHECK_FALSE(fs::exists(first));
    CHECK_FALSE(contains(read_file(file), "hearsay.optimizer_file"));
  }
  auto target = hearsay::make_model("lenet");
  SECTION("a missing optimizer file is named, with what to do") {
    fs::remove(first);
    require_read_fails(file, *target, "checkpoint.optimizer-1234.safetensors' is missing: copy it along");
  }
  SECTION("an optimizer file of another step is refused") {
    hearsay::TrainingState later = f.state;
    later.step = 99;
    TempPath other;
    fs::create_directories(other.path());
    hearsay::write_checkpoint(hearsay::checkpoint_path(other.path()), *f.model, later);
    fs::copy_file(other.path() / "checkpoint.optimizer-99.safetensors", first,
                  fs::copy_options::overwrite_existing);
    require_read_fails(file, *target, "at step 99, not for the checkpoint's");
  }
  SECTION("a name that is not one of ours (a path elsewhere) is refused") {
    RawFile raw = RawFile::parse(read_file(file));
    raw.header["__metadata__"]["hearsay.optimizer_file"] = "../elsewhere.safetensors";
    write_bytes(file, raw.bytes());
    require_read_fails(file, *target, "is not a name it writes");
  }
}

TEST_CASE("a format-1 checkpoint, with the optimizer state inside, is still read", "[checkpoint]") {
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  const fs::path file = hearsay::checkpoint_path(dir.path());
  hearsay::write_checkpoint(file, *f.model, f.state);
  // Made as format 1 wrote it: "optimizer.state" after the model's tensors, no optimizer file.
  RawFile raw = RawFile::parse(read_file(file));
  raw.header["__metadata__"]["hearsay.format_version"] = "1";
  raw.header["__metadata__"].erase("hearsay.optimizer_file");
  const auto begin = raw.data.size();
  const auto& values = f.state.optimizer_state;
  raw.data.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  raw.header["optimizer.state"] = {
      {"dtype", "F32"}, {"shape", {values.size()}}, {"data_offsets", {begin, begin + values.size() * 4}}};
  write_bytes(file, raw.bytes());
  fs::remove(dir.path() / "checkpoint.optimizer-1234.safetensors");
  auto restored = hearsay::make_model("lenet");
  const auto s = hearsay::read_checkpoint(file, *restored);
  CHECK(s.optimizer_state == values);
  CHECK(snapshot(*restored) == snapshot(*f.model));
  // In a format-2 file the same tensor is foreign.
  raw.header["__metadata__"]["hearsay.format_version"] = "2";
  write_bytes(file, raw.bytes());
  require_read_fails(file, *restored, "unexpected tensor 'optimizer.state'");
}

TEST_CASE("an independent Python reader sees the checkpoint's tensors, shapes, sums and metadata",
          "[checkpoint][process]") {
  INFO("python3 is required by the build (CMake) and installed by scripts/setup");
  REQUIRE(std::system("python3 -c 'import json, struct' > /dev/null 2>&1") == 0);
  Fixture f;
  TempPath dir;
  fs::create_directories(dir.path());
  const fs::path file = hearsay::checkpoint_path(dir.path());
  hearsay::write_checkpoint(file, *f.model, f.state);

  const std::string command =
      std::string("python3 '") + HEARSAY_SOURCE_DIR + "/tests/read_safetensors.py' '" + file.string() + "'";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  REQUIRE(::pclose(pipe) == 0);
  const auto summary = nlohmann::json::parse(output);

  CHECK(summary["data_start"].get<std::uint64_t>() % 8 == 0);
  const auto& meta = summary["metadata"];
  CHECK(meta["hearsay.fingerprint"] == f.model->fingerprint());
  CHECK(meta["hearsay.step"] == "1234");
  CHECK(meta["hearsay.epoch"] == "3");
  CHECK(meta["hearsay.epochs_completed"] == "2");  // epoch is the one a resume goes on in
  CHECK(meta["hearsay.optimizer"] == "sgd");
  CHECK(meta["peer"] == "3");

  // Expected: the model's tensors in buffer order, and nothing else. The sums
  // are compared with a relative tolerance: Python adds the floats in double precision
  // while this side adds in double too but in another order, so the last bits differ.
  struct Expected {
    std::string name, shape;
    const float* data;
    std::int64_t count;
  };
  std::vector<Expected> expected;
  for (const auto& t : f.model->named_params())
    expected.push_back({t.name, t.shape.str(), f.model->params().data() + t.offset, t.shape.numel()});

  const auto& tensors = summary["tensors"];
  REQUIRE(tensors.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& t = tensors[i];
    INFO(expected[i].name);
    CHECK(t["name"] == expected[i].name);
    CHECK(t["dtype"] == "F32");
    std::string shape = "[";
    for (std::size_t d = 0; d < t["shape"].size(); ++d)
      shape += (d ? "," : "") + std::to_string(t["shape"][d].get<std::int64_t>());
    CHECK(shape + "]" == expected[i].shape);
    double sum = 0, magnitude = 0;
    for (std::int64_t k = 0; k < expected[i].count; ++k) {
      sum += expected[i].data[k];
      magnitude += std::fabs(expected[i].data[k]);
    }
    // Relative to the sum of magnitudes: a sum of random-sign values may be near zero.
    CHECK(std::fabs(t["sum"].get<double>() - sum) <= 1e-3 * std::max(magnitude, 1e-30));
  }
}
