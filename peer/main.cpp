// hearsay: gossip-based decentralized training. One executable, several subcommands.
#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"hearsay: decentralized deep-learning training by gossip"};
  app.require_subcommand(1);
  app.add_subcommand("train", "train one model in one process (no gossip): the baseline");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
