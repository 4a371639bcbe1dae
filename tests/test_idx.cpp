// IDX reading and MNIST-format loading: round trips, every kind of broken file, the real
// Fashion-MNIST files when installed, and the synthetic stand-in.
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "model/data/dataset.hpp"
#include "model/data/idx.hpp"
#include "test_support.hpp"

using namespace hearsay;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using Bytes = std::vector<std::uint8_t>;

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir : testing::TempPath {
  TempDir() { fs::create_directories(path()); }
};

Bytes idx_bytes(const std::vector<std::uint32_t>& dims, const Bytes& data, std::uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  if (!bytes.empty())
    REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes random_bytes(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng.below(256));
  return out;
}

// The DataError message read_idx(path) throws; fails the test if it does not throw one.
std::string idx_error(const std::string& path) {
  try {
    read_idx(path);
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("read_idx('" << path << "') did not throw DataError");
  return {};
}

std::string load_error(const std::string& dir) {
  try {
    load_mnist_format(dir);
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("load_mnist_format('" << dir << "') did not throw DataError");
  return {};
}

// A miniature MNIST directory: n_train/n_test images of 3x4 pixels with labels i % 10.
void write_mnist_dir(const TempDir& dir, std::uint32_t n_train, std::uint32_t n_test, bool gz,
                     std::uint64_t seed = 1) {
  const std::string suffix = gz ? ".gz" : "";
  const auto write = gz ? write_gzip : write_plain;
  for (const auto& [prefix, n] :
       {std::pair{std::string("train"), n_train}, std::pair{std::string("t10k"), n_test}}) {
    Bytes labels(n);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
    write(dir.file(prefix + "-images-idx3-ubyte" + suffix), idx_bytes({n, 3, 4}, random_bytes(n * 12, seed)));
    write(dir.file(prefix + "-labels-idx1-ubyte" + suffix), idx_bytes({n}, labels));
  }
}

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

TEST_CASE("read_idx round-trips plain and gzipped files", "[data][idx]") {
  TempDir dir;
  const Bytes images = random_bytes(7 * 3 * 5, 11);
  const Bytes labels = random_bytes(7, 12);
  write_plain(dir.file("images"), idx_bytes({7, 3, 5}, images));
  write_gzip(dir.file("images.gz"), idx_bytes({7, 3, 5}, images));
  write_plain(dir.file("labels"), idx_bytes({7}, labels));
  // Compression is recognised by its magic bytes, not by the file name.
  write_gzip(dir.file("labels-gz-without-suffix"), idx_bytes({7}, labels));
  write_gzip(dir.file("four-d.gz"), idx_bytes({2, 1, 3, 2}, random_bytes(12, 13)));

  for (const auto* name : {"images", "images.gz"}) {
    const IdxArray a = read_idx(dir.file(name));
    CHECK(a.dims == std::vector<std::int64_t>{7, 3, 5});
    CHECK(a.data == images);
  }
  for (const auto* name : {"labels", "labels-gz-without-suffix"}) {
    const IdxArray a = read_idx(dir.file(name));
    CHECK(a.dims == std::vector<std::int64_t>{7});
    CHECK(a.data == labels);
  }
  const IdxArray four = read_idx(dir.file("four-d.gz"));
  CHECK(four.dims == std::vector<std::int64_t>{2, 1, 3, 2});
  CHECK(four.data == random_bytes(12, 13));
}

TEST_CASE("read_idx round-trips a gzipped file larger than its read chunk", "[data][idx]") {
  TempDir dir;
  const Bytes data = random_bytes(std::size_t{40} << 20, 5);  // 40 MiB: several 16 MiB chunks
  write_gzip(dir.file("big.gz"), idx_bytes({40, 1024, 1024}, data));
  const IdxArray a = read_idx(dir.file("big.gz"));
  CHECK(a.dims == std::vector<std::int64_t>{40, 1024, 1024});
  CHECK(a.data == data);
}

TEST_CASE("read_idx rejects truncated files and names the path", "[data][idx]") {
  TempDir dir;
  const Bytes full = idx_bytes({10, 4, 4}, random_bytes(160, 3));
  const Bytes short_by_one(full.begin(), full.end() - 1);
  write_plain(dir.file("short"), short_by_one);
  write_gzip(dir.file("short.gz"), short_by_one);
  write_plain(dir.file("header-only"), Bytes(full.begin(), full.begin() + 9));
  write_plain(dir.file("empty"), {});
  // A gzip stream cut in half: the compressed bytes themselves end early.
  write_gzip(dir.file("cut.gz"), full);
  const Bytes compressed = read_bytes(dir.file("cut.gz"));
  write_plain(dir.file("cut.gz"), Bytes(compressed.begin(), compressed.begin() + compressed.size() / 2));

  for (const auto* name : {"short", "short.gz", "header-only", "empty", "cut.gz"}) {
    const std::string path = dir.file(name);
    const std::string message = idx_error(path);
    INFO(message);
    CHECK_THAT(message, Contains(path));
    CHECK_THAT(message, Contains("truncated"));
  }
}

TEST_CASE("read_idx rejects trailing garbage", "[data][idx]") {
  TempDir dir;
  Bytes long_by_two = idx_bytes({10, 4}, random_bytes(40, 3));
  long_by_two.push_back(1);
  long_by_two.push_back(2);
  write_plain(dir.file("long"), long_by_two);
  write_gzip(dir.file("long.gz"), long_by_two);
  for (const auto* name : {"long", "long.gz"}) {
    const std::string message = idx_error(dir.file(name));
    CHECK_THAT(message, Contains(dir.file(name)));
    CHECK_THAT(message, Contains("trailing garbage"));
  }
}

TEST_CASE("read_idx rejects a wrong magic number, type or dimension count", "[data][idx]") {
  TempDir dir;
  Bytes not_zero = idx_bytes({4}, random_bytes(4, 1));
  not_zero[0] = 0x01;
  write_plain(dir.file("nonzero"), not_zero);
  write_gzip(dir.file("nonzero.gz"), not_zero);
  write_plain(dir.file("float-type"), idx_bytes({4}, random_bytes(16, 1), 0x0D));
  write_plain(dir.file("zero-dims"), idx_bytes({}, {}));
  write_plain(dir.file("five-dims"), idx_bytes({1, 1, 1, 1, 1}, {7}));
  write_plain(dir.file("text"), {'h', 'e', 'l', 'l', 'o', '\n'});

  CHECK_THAT(idx_error(dir.file("nonzero")), Contains("magic") && Contains(dir.file("nonzero")));
  CHECK_THAT(idx_error(dir.file("nonzero.gz")), Contains("magic") && Contains(dir.file("nonzero.gz")));
  CHECK_THAT(idx_error(dir.file("text")), Contains("magic"));
  CHECK_THAT(idx_error(dir.file("float-type")), Contains("type 0x0d") && Contains(dir.file("float-type")));
  CHECK_THAT(idx_error(dir.file("zero-dims")), Contains("dimension count 0"));
  CHECK_THAT(idx_error(dir.file("five-dims")), Contains("dimension count 5"));
}

TEST_CASE("read_idx rejects corrupt gzip data with zlib's reason", "[data][idx]") {
  TempDir dir;
  write_gzip(dir.file("good.gz"), idx_bytes({64, 8}, random_bytes(512, 9)));
  const Bytes good = read_bytes(dir.file("good.gz"));
  REQUIRE(good.size() > 20);

  Bytes bad_block = good;
  bad_block[10] = 0xFF;  // first deflate block header after the 10-byte gzip header: reserved type 3
  write_plain(dir.file("bad-block.gz"), bad_block);
  Bytes bad_crc = good;
  bad_crc[good.size() - 8] ^= 0x5A;  // the CRC-32 in the 8-byte trailer no longer matches the data
  write_plain(dir.file("bad-crc.gz"), bad_crc);
  Bytes bad_method = good;
  bad_method[2] = 0x07;  // gzip compression method must be 8 (deflate)
  write_plain(dir.file("bad-method.gz"), bad_method);

  for (const auto* name : {"bad-block.gz", "bad-crc.gz", "bad-method.gz"}) {
    const std::string message = idx_error(dir.file(name));
    INFO(message);
    CHECK_THAT(message, Contains(dir.file(name)));
    CHECK_THAT(message, Contains("zlib"));
  }
}

TEST_CASE("read_idx rejects absurd dimensions and never allocates from the header alone", "[data][idx]") {
  TempDir dir;
  // Past the 2 GiB cap: rejected from the header, whatever follows.
  write_plain(dir.file("huge"), idx_bytes({65536, 32769}, random_bytes(10, 1)));
  write_gzip(dir.file("huge.gz"), idx_bytes({65536, 32769}, random_bytes(10, 1)));
  write_plain(dir.file("overflow"), idx_bytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}));
  for (const auto* name : {"huge", "huge.gz", "overflow"}) {
    const std::string message = idx_error(dir.file(name));
    CHECK_THAT(message, Contains("absurd") && Contains(dir.file(name)));
  }

  // Under the cap but far more than the file holds (1 GiB announced, 10 bytes present): must fail
  // as truncated without first committing a gigabyte. Zero-filled allocation would show in the peak RSS.
  write_plain(dir.file("gig"), idx_bytes({1u << 30}, random_bytes(10, 1)));
  write_gzip(dir.file("gig.gz"), idx_bytes({1u << 30}, random_bytes(10, 1)));
  const long before_kib = peak_rss_kib();
  CHECK_THAT(idx_error(dir.file("gig")), Contains("truncated"));
  CHECK_THAT(idx_error(dir.file("gig.gz")), Contains("truncated"));
  CHECK(peak_rss_kib() - before_kib < 256 * 1024);
}

TEST_CASE("read_idx names the path of a missing file", "[data][idx]") {
  TempDir dir;
  const std::string message = idx_error(dir.file("nope"));
  CHECK_THAT(message, Contains(dir.file("nope")) && Contains("cannot open"));
  CHECK_THAT(idx_error(dir.str()), Contains("directory"));
}

TEST_CASE("load_mnist_format reads an MNIST-format directory, preferring .gz files", "[data][idx]") {
  TempDir dir;
  write_mnist_dir(dir, 30, 20, /*gz=*/false, /*seed=*/1);
  write_mnist_dir(dir, 30, 20, /*gz=*/true, /*seed=*/2);  // different pixels: tells which was read
  const TrainTest data = load_mnist_format(dir.str());
  CHECK(data.source == dir.str());
  const Bytes expect = random_bytes(30 * 12, 2);
  CHECK(data.train.count == 30);
  CHECK(data.test.count == 20);
  CHECK(data.train.rows == 3);
  CHECK(data.train.cols == 4);
  CHECK(data.train.classes == 10);
  REQUIRE(data.train.images.size() == 30 * 12);
  for (std::size_t i = 0; i < expect.size(); ++i) REQUIRE(data.train.images[i] == expect[i] / 255.0f);
  CHECK(data.train.image(2)[0] == data.train.images[24]);
  for (std::size_t i = 0; i < 30; ++i) REQUIRE(data.train.labels[i] == i % 10);

  // Without the .gz files the plain ones are read.
  for (const auto* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::remove(dir.file(name));
  CHECK(load_mnist_format(dir.str()).train.images[0] == random_bytes(1, 1)[0] / 255.0f);
}

TEST_CASE("load_mnist_format with a selector keeps only the picked examples, in its order", "[data][idx]") {
  TempDir dir;
  write_mnist_dir(dir, 30, 20, /*gz=*/true, /*seed=*/3);
  const TrainTest all = load_mnist_format(dir.str());
  const std::vector<std::int64_t> picked = {7, 2, 29, 2};
  bool saw_labels_only = false;
  const TrainTest some = load_mnist_format(dir.str(), [&](const Dataset& d) {
    saw_labels_only = d.images.empty() && d.count == 30 && d.labels.size() == 30;
    return picked;
  });
  CHECK(saw_labels_only);
  const Dataset expect = select(all.train, picked);
  CHECK(some.train.count == 4);
  CHECK(some.train.rows == 3);
  CHECK(some.train.cols == 4);
  CHECK(some.train.images == expect.images);
  CHECK(some.train.labels == expect.labels);
  CHECK(some.test.images == all.test.images);  // the test set is never cut
  CHECK(some.test.count == 20);

  const TrainTest synthetic = load_mnist_format("synthetic", [](const Dataset&) {
    return std::vector<std::int64_t>{5, 0};
  });
  CHECK(synthetic.train.count == 2);
  CHECK(synthetic.train.labels == select(load_mnist_format("synthetic").train, {5, 0}).labels);

  try {
    load_mnist_format(dir.str(), [](const Dataset&) { return std::vector<std::int64_t>{30}; });
    FAIL("an index past the end did not throw");
  } catch (const DataError& e) {
    CHECK_THAT(e.what(), Contains("30") && Contains("outside"));
  }
}

TEST_CASE("load_mnist_format explains a missing directory", "[data][idx]") {
  TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  const std::string message = load_error(missing);
  CHECK_THAT(message, Contains(missing));
  CHECK_THAT(message, Contains("dataset-fashion-mnist"));
  CHECK_THAT(message, Contains("apt-get install"));
  CHECK_THAT(message, Contains("--data") && Contains("HEARSAY_DATA") && Contains("synthetic"));
}

TEST_CASE("load_mnist_format rejects inconsistent files", "[data][idx]") {
  TempDir dir;
  write_mnist_dir(dir, 30, 20, /*gz=*/true);

  SECTION("a missing file is named") {
    fs::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
    CHECK_THAT(load_error(dir.str()), Contains(dir.file("t10k-labels-idx1-ubyte.gz")));
  }
  SECTION("image and label counts must agree") {
    write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({29}, Bytes(29, 1)));
    CHECK_THAT(load_error(dir.str()),
               Contains("mismatch") && Contains(dir.file("train-labels-idx1-ubyte.gz")));
  }
  SECTION("labels must be below 10") {
    Bytes labels(30, 3);
    labels[17] = 10;
    write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({30}, labels));
    const std::string message = load_error(dir.str());
    CHECK_THAT(message, Contains("label 10 at index 17") && Contains(dir.file("train-labels-idx1-ubyte.gz")));
  }
  SECTION("images must be 3-D") {
    write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes({20, 12}, Bytes(240, 0)));
    CHECK_THAT(load_error(dir.str()), Contains("3-D") && Contains(dir.file("t10k-images-idx3-ubyte.gz")));
  }
}

TEST_CASE("the installed Fashion-MNIST loads completely", "[data][idx]") {
  INFO(kDefaultDataDir << " is installed by scripts/setup (Debian package dataset-fashion-mnist)");
  REQUIRE(fs::is_directory(kDefaultDataDir));
  const auto start = std::chrono::steady_clock::now();
  const TrainTest data = load_mnist_format(kDefaultDataDir);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("loaded Fashion-MNIST in " << seconds << " s");
  for (const Dataset* d : {&data.train, &data.test}) {
    CHECK(d->rows == 28);
    CHECK(d->cols == 28);
    CHECK(d->images.size() == static_cast<std::size_t>(d->count * 784));
    CHECK(d->labels.size() == static_cast<std::size_t>(d->count));
    std::vector<int> per_class(10, 0);
    for (auto label : d->labels) {
      REQUIRE(label < 10);
      ++per_class[label];
    }
    for (int n : per_class) CHECK(n == d->count / 10);  // Fashion-MNIST is exactly balanced
    float lo = 1, hi = 0;
    for (float v : d->images) lo = std::min(lo, v), hi = std::max(hi, v);
    CHECK(lo == 0.0f);
    CHECK(hi == 1.0f);
  }
  CHECK(data.train.count == 60000);
  CHECK(data.test.count == 10000);
}

TEST_CASE("resolve_data_dir: flag, then HEARSAY_DATA, then the default", "[data][idx]") {
  const char* saved = std::getenv("HEARSAY_DATA");
  const std::string saved_value = saved ? saved : "";
  ::setenv("HEARSAY_DATA", "/from/env", 1);
  CHECK(resolve_data_dir("/from/flag") == "/from/flag");
  CHECK(resolve_data_dir("") == "/from/env");
  ::setenv("HEARSAY_DATA", "", 1);
  CHECK(resolve_data_dir("") == kDefaultDataDir);
  ::unsetenv("HEARSAY_DATA");
  CHECK(resolve_data_dir("") == "/usr/share/datasets/fashion-mnist");
  if (saved) ::setenv("HEARSAY_DATA", saved_value.c_str(), 1);
}

TEST_CASE("synthetic data is deterministic, in range and learnable", "[data][synthetic]") {
  const TrainTest data = load_mnist_format("synthetic");
  CHECK(data.source == "synthetic");
  const Dataset& train = data.train;
  const Dataset& test = data.test;
  REQUIRE(train.count == 6000);
  REQUIRE(test.count == 1000);
  CHECK(train.rows == 28);
  CHECK(train.cols == 28);
  REQUIRE(train.images.size() == 6000u * 784u);
  for (float v : train.images) REQUIRE((v >= 0.0f && v <= 1.0f));
  std::vector<int> per_class(10, 0);
  for (auto label : train.labels) {
    REQUIRE(label < 10);
    ++per_class[label];
  }
  for (int n : per_class) CHECK((n > 450 && n < 750));  // balanced-ish around 600

  const Dataset again = synthetic_dataset(6000, 1);
  CHECK(again.images == train.images);
  CHECK(again.labels == train.labels);
  CHECK(synthetic_dataset(100, 3).images != synthetic_dataset(100, 4).images);

  // Nearest class mean, fitted on train, must classify the test set (other seed) far above the
  // 10% of chance: the classes share prototypes across seeds and are separable.
  std::vector<double> means(10 * 784, 0.0);
  for (std::int64_t i = 0; i < train.count; ++i)
    for (int p = 0; p < 784; ++p)
      means[train.labels[i] * 784 + p] += train.image(i)[p] / per_class[train.labels[i]];
  int correct = 0;
  for (std::int64_t i = 0; i < test.count; ++i) {
    int best = -1;
    double best_distance = 1e300;
    for (int c = 0; c < 10; ++c) {
      double distance = 0;
      for (int p = 0; p < 784; ++p)
        distance += (test.image(i)[p] - means[c * 784 + p]) * (test.image(i)[p] - means[c * 784 + p]);
      if (distance < best_distance) best_distance = distance, best = c;
    }
    correct += best == test.labels[i];
  }
  const double accuracy = correct / 1000.0;
  INFO("nearest-class-mean accuracy " << accuracy);
  CHECK(accuracy > 0.6);
}

TEST_CASE("select copies the chosen examples in order", "[data]") {
  const Dataset d = synthetic_dataset(20, 7, 5, 6, 4);
  const Dataset s = select(d, {19, 0, 7, 7});
  REQUIRE(s.count == 4);
  CHECK(s.rows == 5);
  CHECK(s.cols == 6);
  CHECK(s.classes == 4);
  const std::int64_t picked[] = {19, 0, 7, 7};
  for (int k = 0; k < 4; ++k) {
    CHECK(s.labels[k] == d.labels[picked[k]]);
    CHECK(std::equal(s.image(k), s.image(k) + 30, d.image(picked[k])));
  }
  CHECK(select(d, {}).count == 0);
  CHECK_THROWS_AS(select(d, {20}), DataError);
  CHECK_THROWS_AS(select(d, {-1}), DataError);
}
