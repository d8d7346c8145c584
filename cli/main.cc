// memplan: wires the stages together; the app is cli/app.cc, each subcommand commands_*.cc.
#include "commands.h"

int main(int argc, char** argv) { return memplan::cli::Main(argc, argv); }
