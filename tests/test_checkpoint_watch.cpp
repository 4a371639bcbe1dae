// The watch behind the `checkpoints` invariant (sim/checkpoint_watch.hpp): a checkpoint
// replaced whole is read once per version and passes; one left truncated under the
// checkpoint's name, as a writer without atomic replacement would leave it on a full
// disk, is named with its peer; an absent file is fine.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/checkpoint.hpp"
#include "model/zoo.hpp"
#include "sim/checkpoint_watch.hpp"
#include "test_support.hpp"

using Catch::Matchers::Contains;
using namespace hearsay;
using hearsay::testing::TempPath;

TEST_CASE("checkpoint watch: whole versions pass, a truncated one is named, an absent one is fine",
          "[checkpoint][chaos]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto file = checkpoint_path(dir.path());
  sim::CheckpointWatch watch("mlp");
  watch.add("rank3", file);
  watch.look(0.1);  // absent: not written yet
  CHECK(watch.versions_read() == 0);

  auto model = make_model("mlp");
  model->init(1);
  TrainingState state;
  state.step = 10;
  write_checkpoint(file, *model, state);
  watch.look(0.2);
  CHECK(watch.versions_read() == 1);
  watch.look(0.3);  // unchanged: not read again
  CHECK(watch.versions_read() == 1);
  state.step = 20;
  write_checkpoint(file, *model, state);  // replaced whole (rename)
  std::filesystem::last_write_time(file,
                                   std::filesystem::file_time_type::clock::now() + std::chrono::seconds(1));
  watch.look(0.4);
  CHECK(watch.versions_read() == 2);
  CHECK(watch.problems().empty());

  // Half of it, written in place.
  const std::string whole = hearsay::testing::read_file(file);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(whole.data(), static_cast<std::streamsize>(whole.size() / 2));
  }
  watch.look(12.3);
  REQUIRE(watch.problems().size() == 1);
  CHECK_THAT(watch.problems()[0], Contains("rank3's checkpoint at 12.3 s was not whole"));

  std::filesystem::remove(file);
  watch.look(12.4);
  CHECK(watch.problems().size() == 1);
}
