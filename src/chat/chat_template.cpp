// The public entry of chat templates: ChatTemplate over the Jinja engine
// (chat/jinja_*: values, lexer, parser, renderer, builtins), and the model
// directory's template applied to chat messages as transformers does.
#include "chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_renderer.h"
#include "chat/jinja_value.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace mx {

struct ChatTemplate::Impl : jinja::Program {};

namespace {

std::string normalize_newlines(std::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k] == '\r') {
      s += '\n';
      if (k + 1 < in.size() && in[k + 1] == '\n') ++k;
    } else {
      s += in[k];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

template <class J>
std::string render_impl(const jinja::Program& prog, const J& context) {
  if (!context.is_object()) fail("chat template: the render context must be a JSON object");
  jinja::Scope root;
  for (auto it = context.begin(); it != context.end(); ++it) root.set(it.key(), jinja::from_json(it.value()));
  std::string out;
  jinja::Renderer r{prog.src};
  r.out = &out;
  r.scope = &root;
  r.root = &root;
  jinja::exec_body(r, prog.body);
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view src) {
  auto impl = std::make_shared<Impl>();
  impl->src = normalize_newlines(src);
  jinja::parse(*impl);
  ChatTemplate t;
  t.impl_ = impl;
  return t;
}

std::string ChatTemplate::render(const nlohmann::json& context) const { return render_impl(*impl_, context); }
std::string ChatTemplate::render(const nlohmann::ordered_json& context) const { return render_impl(*impl_, context); }
bool ChatTemplate::uses_variable(std::string_view name) const { return impl_->names.count(name) > 0; }
bool ChatTemplate::iterates_content() const { return impl_->iterates_content; }
const std::string& ChatTemplate::source() const { return impl_->src; }

// ============================================================================
// Model directories
// ============================================================================

namespace {

nlohmann::ordered_json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail("cannot open {}", p.string());
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", p.string(), e.what());
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("cannot open {}", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool has_chat_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return true;
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (!fs::exists(cfg_path)) return false;
  nlohmann::ordered_json cfg = read_json_file(cfg_path);
  return cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null();
}

ModelChatTemplate load_chat_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path cfg_path = dir / "tokenizer_config.json";
  nlohmann::ordered_json cfg = fs::exists(cfg_path) ? read_json_file(cfg_path) : nlohmann::ordered_json::object();
  if (!cfg.is_object()) fail("{}: not a JSON object", cfg_path.string());
  std::string src;
  bool found = false;
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      src = ct.get<std::string>();
      found = true;
    } else if (ct.is_array()) {
      std::vector<std::string> names;
      for (const auto& e : ct) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          fail("{}: chat_template list entries need a string 'name' and 'template'", cfg_path.string());
        names.push_back(e["name"].get<std::string>());
        if (names.back() == "default") {
          src = e["template"].get<std::string>();
          found = true;
        }
      }
      if (!found)
        fail("{}: chat_template lists templates {} but none is named 'default'", cfg_path.string(),
             nlohmann::json(names).dump());
    } else {
      fail("{}: chat_template is neither a string nor a list of named templates", cfg_path.string());
    }
  }
  if (!found && fs::exists(dir / "chat_template.jinja")) {
    src = slurp(dir / "chat_template.jinja");
    found = true;
  }
  if (!found) fail("{}: no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja)", model_dir);
  ModelChatTemplate m{ChatTemplate::parse(src), nlohmann::ordered_json::object()};
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!cfg.contains(k)) continue;
    const auto& v = cfg[k];
    if (v.is_string()) m.special_tokens[k] = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string())
      m.special_tokens[k] = v["content"].get<std::string>();
  }
  return m;
}

std::string apply_chat_template(const std::string& model_dir, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_context) {
  const ModelChatTemplate m = load_chat_template(model_dir);
  return apply_chat_template(m, messages, add_generation_prompt, extra_context);
}

std::string apply_chat_template(const ModelChatTemplate& m, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_context) {
  if (!messages.is_array()) fail("apply_chat_template: messages must be a JSON array");
  if (!extra_context.is_null() && !extra_context.is_object())
    fail("apply_chat_template: the extra context must be a JSON object");
  if (extra_context.is_object() && extra_context.contains("tools")) {
    const auto& tools = extra_context["tools"];
    if (!tools.is_null() && !(tools.is_array() && tools.empty()) && !m.tmpl.uses_variable("tools"))
      fail("the chat template does not support tools (it never reads 'tools'), but tools were given");
  }
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& msg : messages) {
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      fail("apply_chat_template: every message needs a string 'role' (got {})", msg.dump());
    nlohmann::ordered_json copy = msg;
    if (msg.contains("content") && msg["content"].is_array() && !m.tmpl.iterates_content()) {
      std::string text;
      bool first = true;
      for (const auto& part : msg["content"]) {
        if (part.is_string()) {
          text += (first ? "" : "\n") + part.get<std::string>();
        } else if (part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") &&
                   part["text"].is_string()) {
          text += (first ? "" : "\n") + part["text"].get<std::string>();
        } else {
          fail("apply_chat_template: content part {} is not supported (only {{\"type\": \"text\", \"text\": ...}})",
               part.dump());
        }
        first = false;
      }
      copy["content"] = text;
    }
    msgs.push_back(std::move(copy));
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  for (auto it = m.special_tokens.begin(); it != m.special_tokens.end(); ++it) ctx[it.key()] = it.value();
  if (extra_context.is_object())
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it) ctx[it.key()] = it.value();
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = add_generation_prompt;
  return m.tmpl.render(ctx);
}

std::string apply_chat_template(const std::string& model_dir, const nlohmann::json& messages,
                                bool add_generation_prompt) {
  return apply_chat_template(model_dir, nlohmann::ordered_json(messages), add_generation_prompt,
                             nlohmann::ordered_json::object());
}

}  // namespace mx
