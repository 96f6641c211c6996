#pragma once
// Each kvscope-cli subcommand: argc/argv start after the subcommand name's index `first`.
namespace kvscope::cli {

int cmd_generate(int argc, char** argv, int first);
int cmd_inspect(int argc, char** argv, int first);
int cmd_make_model(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_run(int argc, char** argv, int first);
int cmd_eval(int argc, char** argv, int first);
int cmd_plan(int argc, char** argv, int first);
int cmd_replay(int argc, char** argv, int first);
int cmd_chat(int argc, char** argv, int first);
int cmd_chat_template(int argc, char** argv, int first);
int cmd_tokenize(int argc, char** argv, int first);
int cmd_pull(int argc, char** argv, int first);
int cmd_serve(int argc, char** argv, int first);
int cmd_attach(int argc, char** argv, int first);

}  // namespace kvscope::cli
