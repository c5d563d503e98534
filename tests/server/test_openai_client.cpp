// The official `openai` npm package as the client: completions, chat,
// streaming and errors (tests/server/openai_client/test.mjs) against an
// in-process server with a text model. The package is installed with `npm ci`
// from the committed package-lock.json into build/openai_client/ the first
// time (and whenever the lock file changes).
#include <gtest/gtest.h>

#include "server/server_test_util.h"

using namespace mxtest;

TEST(OpenAiClient, OfficialNpmClientWorksAgainstTheServer) {
  MXTEST_NEEDS(run("command -v node").code == 0 && run("command -v npm").code == 0,
               "node and npm (the openai npm client test)");
  const auto v = run("node -p 'process.versions.node.split(\".\")[0]'");
  MXTEST_NEEDS(v.code == 0 && std::atoi(v.out.c_str()) >= 20,
               "node 20 or later, which the openai npm package (v6) requires (found " << v.out << ")");
  const fs::path src = source_dir() / "tests" / "server" / "openai_client";
  const fs::path work = fs::path(mxserve()).parent_path() / "openai_client";
  fs::create_directories(work);
  for (const char* f : {"package.json", "package-lock.json", "test.mjs"})
    fs::copy_file(src / f, work / f, fs::copy_options::overwrite_existing);
  const std::string lock = slurp(work / "package-lock.json");
  const fs::path stamp = work / "node_modules" / ".mxserve-lock";
  if (!fs::exists(work / "node_modules" / "openai" / "package.json") || !fs::exists(stamp) || slurp(stamp) != lock) {
    auto r = run("cd '" + work.string() + "' && timeout 300 npm ci --no-audit --no-fund", true);
    ASSERT_EQ(r.code, 0) << "npm ci failed:\n" << r.out;
    spit(stamp, lock);
  }

  TempDir d;
  write_text_model(d.path().string(), 5);
  TestServer::Options o;
  o.tokenizer = (d.path() / "tokenizer.json").string();
  o.name = "text-model";
  TestServer srv(d.path().string(), o);
  // Tool calls need a chat template with a call format: the synthetic Qwen3's.
  const std::string qwen = synthetic_model_dir(d, "qwen3", 5);
  set_context_length(qwen, 2048);
  TestServer::Options qo = TestServer::with_own_tokenizer(qwen);
  qo.name = "tools-model";
  TestServer tools_srv(qwen, qo, qwen);
  auto r = run("cd '" + work.string() + "' && MXSERVE_BASE_URL=http://127.0.0.1:" + std::to_string(srv.port()) +
                   "/v1 MXSERVE_MODEL=text-model MXSERVE_TOOLS_BASE_URL=http://127.0.0.1:" +
                   std::to_string(tools_srv.port()) + "/v1 MXSERVE_TOOLS_MODEL=tools-model timeout 90 node test.mjs",
               true);
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("all openai client checks passed"), std::string::npos) << r.out;
}
