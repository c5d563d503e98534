#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "backends/registry.h"
#include "server/openai_api.h"
#include "server/reasoning.h"
#include "server/text_stream.h"
#include "server/tool_calls.h"

namespace mx::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void send_error(HttpResponse& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(HttpResponse& res, const ApiError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  send_error(res, e.status, error_body(e));
}

// One engine event, tagged with the choice it belongs to.
struct Event {
  int choice;
  TokenEvent ev;
};

// Engine thread -> HTTP thread. The engine's callbacks hold it by shared_ptr,
// so it outlives whichever side finishes first.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Event> q;
  bool wake_each = true;  // wake the reader per event; else only on final events
  void push(Event e) {
    const bool wake = wake_each || e.ev.finished;
    {
      std::lock_guard<std::mutex> lk(mu);
      q.push_back(std::move(e));
    }
    if (wake) cv.notify_one();
  }
  std::vector<Event> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, timeout, [&] { return !q.empty(); });
    std::vector<Event> out;
    out.swap(q);
    return out;
  }
};

struct Choice {
  uint64_t engine_id = 0;
  bool live = false;  // submitted to the engine and not finished there as far as we know
  bool done = false;
  std::unique_ptr<TextStream> text;
  std::string finish_reason;
  std::string full_text;          // non-streamed: the whole text (content, when reasoning is split off)
  std::string delta;              // streamed: text not yet sent
  std::unique_ptr<ReasoningSplitter> reasoning;  // chat to a thinking model: splits off reasoning_content
  std::string full_reasoning, reasoning_delta;
  std::unique_ptr<ToolCallStream> tool_stream;  // chat with tools: splits the calls off the content
  std::vector<ToolCall> calls;                  // the calls found so far ...
  std::vector<std::string> call_ids;            // ... and their ids ("call_...")
  size_t sent_calls = 0;                        // streamed: calls already in a chunk
  std::vector<int32_t> tokens;    // every token accepted
  std::vector<float> logprobs;    // per token when asked
  std::vector<std::vector<std::pair<int32_t, float>>> top;  // per token: the most likely alternatives
  std::vector<size_t> offsets;    // byte offset of each token's text in the completion
  // echo: the prompt's text, tokens and (with logprobs) their logprobs (the first has none).
  std::string echo_text;
  std::vector<int32_t> echo_tokens;
  std::vector<TokenLogprob> echo_logprobs;
  bool echo_unsent = false;       // streamed: not yet in a chunk
  size_t raw_bytes = 0;
  size_t sent_tokens = 0;         // streamed: tokens already in a chunk
  int prompt_tokens = 0, cached_tokens = 0;
};

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const Tokenizer* tok;
  ServerOptions opts;
  ApiContext ctx;
  std::vector<int32_t> extra_stop_ids;  // tokenizer end-of-generation ids the model config lacks
  std::vector<int32_t> tool_marker_ids; // the tool-call tags that are control tokens: shown to requests with tools
  std::unique_ptr<StructuredOutputs> structured;  // response_format (needs the tokenizer)
  std::shared_ptr<ServerMetrics> metrics = std::make_shared<ServerMetrics>();
  int port = -1;

  std::atomic<bool> draining{false}, stopped{false}, run_started{false}, run_done{false};
  std::mutex live_mu;
  std::condition_variable live_cv;
  int active = 0;                 // generation requests in flight (guarded by live_mu)
  std::set<uint64_t> live_ids;    // engine ids of unfinished choices
  // Last: destroyed first, so no handler runs while the rest goes.
  std::unique_ptr<HttpTransport> http;

  // Keeps `active` counted while a request (or its stream) is alive.
  struct ActiveGuard {
    Impl* impl;
    explicit ActiveGuard(Impl* i) : impl(i) {
      std::lock_guard<std::mutex> lk(impl->live_mu);
      ++impl->active;
    }
    ~ActiveGuard() {
      {
        std::lock_guard<std::mutex> lk(impl->live_mu);
        --impl->active;
      }
      impl->live_cv.notify_all();
    }
  };

  struct Job {
    ApiRequest req;
    std::shared_ptr<Channel> ch = std::make_shared<Channel>();
    std::vector<Choice> choices;
    std::string id;
    int64_t created = 0;
    Clock::time_point arrival;
    int remaining = 0;
    std::unique_ptr<ActiveGuard> guard;
  };

  Impl(Engine& e, const Tokenizer* t, ServerOptions o) : engine(e), tok(t), opts(std::move(o)) {
    const ModelConfig& c = engine.config();
    ctx.tokenizer = tok;
    if (tok) {
      structured = std::make_unique<StructuredOutputs>(*tok, c.vocab_size);
      ctx.structured = structured.get();
    }
    ctx.served_model_name = opts.served_model_name;
    ctx.model_dir = opts.model_dir;
    if (tok)
      for (size_t id = 0; id < tok->vocab_size; ++id)
        ctx.max_token_bytes = std::max(ctx.max_token_bytes, tok->token_piece(int32_t(id), true).size());
    // Read once: a template changed or broken on disk later does not change a
    // running server, and a broken one is a startup error.
    if (!opts.model_dir.empty() && has_chat_template(opts.model_dir))
      ctx.chat_template = std::make_shared<const ModelChatTemplate>(load_chat_template(opts.model_dir));
    // A thinking model's template: chat answers split off reasoning_content.
    ctx.reasoning = ctx.chat_template && ctx.chat_template->tmpl.source().find("</think>") != std::string::npos;
    if (ctx.chat_template) ctx.tool_format = detect_tool_format(ctx.chat_template->tmpl.source());
    if (tok) tool_marker_ids = StructuredOutputs::marker_ids(*tok, tool_markers(ctx.tool_format));
    ctx.context_length = int(c.max_position_embeddings);
    ctx.vocab_size = int(c.vocab_size);
    ctx.limits = opts.limits;
    ctx.kv_capacity = int(std::min<int64_t>(int64_t(engine.metrics().kv_blocks_total) * opts.kv_block_size,
                                            std::numeric_limits<int>::max()));
    if (tok)
      for (int32_t id : tok->eog_ids)
        if (id >= 0 && id < c.vocab_size &&
            std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
          extra_stop_ids.push_back(id);
    setup_routes();
  }

  // ------------------------------------------------------------------ jobs

  void forget(Choice& c) {
    if (!c.live) return;
    c.live = false;
    std::lock_guard<std::mutex> lk(live_mu);
    live_ids.erase(c.engine_id);
  }

  // The client is gone (or the request failed part-way): cancel what still runs.
  void cancel_unfinished(Job& job) {
    for (auto& c : job.choices)
      if (c.live) {
        engine.cancel(c.engine_id);
        if (!c.done) finish_choice(c, "abort");
        forget(c);
      }
  }

  void submit_all(Job& job) {
    const ApiRequest& r = job.req;
    job.choices.resize(r.prompts.size());
    job.remaining = int(r.prompts.size());
    for (size_t i = 0; i < r.prompts.size(); ++i) {
      Choice& c = job.choices[i];
      c.text = std::make_unique<TextStream>(tok, r.stop, r.tools ? tool_marker_ids : std::vector<int32_t>{});
      if (r.tools) c.tool_stream = std::make_unique<ToolCallStream>(*r.tools);
      if (r.reasoning) c.reasoning = std::make_unique<ReasoningSplitter>(r.reasoning_open);
      GenerationRequest g;
      g.prompt = r.prompts[i];
      g.sampling = r.sampling;
      g.sampling.seed = r.sampling.seed + i % size_t(r.n);  // n choices: n seed streams
      g.max_tokens = r.max_tokens[i];
      g.stop_ids = r.stop_token_ids;
      if (!r.ignore_eos) g.stop_ids.insert(g.stop_ids.end(), extra_stop_ids.begin(), extra_stop_ids.end());
      g.ignore_eos = r.ignore_eos;
      g.logprobs = r.logprobs ? 1 : 0;
      g.top_logprobs = r.top_logprobs;
      if (r.echo && r.logprobs) g.prompt_logprobs = r.top_logprobs;
      if (r.response_format) {
        // The output may end (EOS) where the format is complete; with ignore_eos it
        // ends where nothing more can follow.
        std::vector<int32_t> eos;
        if (!r.ignore_eos) {
          eos = engine.config().eos_token_ids;
          eos.insert(eos.end(), extra_stop_ids.begin(), extra_stop_ids.end());
        }
        g.constraint = StructuredOutputs::constraint(r.response_format, std::move(eos));
      }
      struct Timing {
        Clock::time_point arrival, last;
        bool first = true;
      };
      auto timing = std::make_shared<Timing>();
      timing->arrival = job.arrival;
      auto cb = [ch = job.ch, idx = int(i), m = metrics, timing](const TokenEvent& ev) {
        const auto now = Clock::now();
        if (ev.token >= 0) {
          if (timing->first)
            m->ttft.observe(seconds(now - timing->arrival));
          else
            m->inter_token.observe(seconds(now - timing->last));
          timing->first = false;
          timing->last = now;
        }
        if (ev.finished) m->request_duration.observe(seconds(now - timing->arrival));
        ch->push(Event{idx, ev});
      };
      try {
        c.engine_id = engine.submit(std::move(g), cb);
      } catch (const Engine::QueueFull& e) {
        cancel_unfinished(job);
        throw ApiError(429, std::string("the server is at capacity: ") + e.what() + "; retry later", "",
                       "rate_limit_exceeded", "rate_limit_error");
      } catch (const Error& e) {
        cancel_unfinished(job);
        std::string msg = e.what();
        const bool ctx_len = dynamic_cast<const Engine::ContextTooLong*>(&e) != nullptr;
        throw ApiError(400, msg, r.kind == ApiKind::Chat ? "messages" : "prompt",
                       ctx_len ? "context_length_exceeded" : "");
      }
      c.live = true;
      std::lock_guard<std::mutex> lk(live_mu);
      live_ids.insert(c.engine_id);
    }
  }

  void finish_choice(Choice& c, const std::string& reason) {
    c.done = true;
    c.finish_reason = reason == "stop" && !c.calls.empty() ? "tool_calls" : reason;
    metrics->count_finish(reason);
    forget(c);
  }

  // Settled output text: to content, or split into reasoning and content.
  static void add_text(Choice& c, const std::string& d) {
    if (!c.reasoning) return add_split(c, "", d);
    std::string r, t;
    c.reasoning->push(d, r, t);
    add_split(c, r, t);
  }
  static void add_split(Choice& c, const std::string& r, const std::string& t) {
    c.reasoning_delta += r, c.full_reasoning += r;
    add_content(c, c.tool_stream ? c.tool_stream->push(t, c.calls) : t);
  }
  static void add_content(Choice& c, const std::string& t) {
    c.delta += t, c.full_text += t;
    while (c.call_ids.size() < c.calls.size()) c.call_ids.push_back(make_id("call_"));
  }
  // The output's end (finished, or cut by a stop string): what the reasoning
  // splitter still held back, e.g. a "</thi" that never became a tag, and a
  // tool call the model ended without its closing tag.
  static void end_text(Choice& c) {
    if (c.reasoning) {
      std::string r, t;
      c.reasoning->finish(r, t);
      add_split(c, r, t);
    }
    if (c.tool_stream) add_content(c, c.tool_stream->finish(c.calls));
  }

  static json tool_calls_json(const Choice& c, size_t from, bool streamed) {
    json out = json::array();
    for (size_t k = from; k < c.calls.size(); ++k) {
      json call = {{"id", c.call_ids[k]},
                   {"type", "function"},
                   {"function", {{"name", c.calls[k].name}, {"arguments", c.calls[k].arguments}}}};
      if (streamed) call["index"] = k;
      out.push_back(std::move(call));
    }
    return out;
  }

  // Applies one engine event to its choice.
  void apply(Job& job, const Event& e) {
    Choice& c = job.choices[size_t(e.choice)];
    if (c.done) return;  // e.g. the abort that follows our cancel after a stop string
    const TokenEvent& ev = e.ev;
    c.prompt_tokens = ev.prompt_tokens;
    c.cached_tokens = ev.cached_tokens;
    if (ev.token >= 0 && job.req.echo && c.echo_tokens.empty()) {  // the first token: the prompt comes first
      c.echo_tokens = job.req.prompts[size_t(e.choice)];
      c.echo_logprobs = ev.prompt_logprobs;
      if (tok) c.echo_text = sanitize_utf8(tok->decode(c.echo_tokens));
      c.echo_unsent = true;
      c.raw_bytes = c.echo_text.size();  // completion offsets follow the prompt's text
    }
    if (ev.token >= 0 && job.req.prompt_only) {  // echo with max_tokens 0: the prompt alone
      engine.cancel(c.engine_id);
      finish_choice(c, "length");
      --job.remaining;
      return;
    }
    if (ev.token >= 0) {
      c.tokens.push_back(ev.token);
      c.offsets.push_back(c.raw_bytes);
      if (tok) c.raw_bytes += c.text->piece(ev.token).size();
      if (job.req.logprobs) c.logprobs.push_back(ev.logprob);
      if (job.req.top_logprobs > 0) c.top.push_back(ev.top);
      add_text(c, c.text->push(ev.token));
      if (c.text->stopped()) {
        end_text(c);
        engine.cancel(c.engine_id);
        finish_choice(c, "stop");
        --job.remaining;
        return;
      }
    }
    if (ev.finished) {
      add_text(c, c.text->finish());
      end_text(c);
      finish_choice(c, to_string(ev.finish_reason));
      --job.remaining;
    }
  }

  std::string token_string(int32_t id) const {
    if (!tok) return "token_id:" + std::to_string(id);
    return sanitize_utf8(tok->token_piece(id));
  }

  // Completions: one {token text: logprob} object per position (tokens with the
  // same text keep the most likely one's logprob, as OpenAI's dict does).
  json top_dict(const std::vector<std::pair<int32_t, float>>& top) const {
    json alts = json::object();
    for (const auto& [id, lp] : top)
      if (!alts.contains(token_string(id))) alts[token_string(id)] = lp;
    return alts;
  }

  // with_echo: completions with echo put the prompt's tokens first.
  json logprobs_json(const Job& job, const Choice& c, size_t from, size_t to, bool with_echo = false) const {
    if (!job.req.logprobs) return json();
    if (job.req.kind == ApiKind::Chat) {
      json content = json::array();
      auto bytes_of = [&](int32_t id) {
        json bytes = json::array();
        if (tok)
          for (unsigned char b : tok->token_piece(id)) bytes.push_back(int(b));
        return bytes;
      };
      for (size_t i = from; i < to; ++i) {
        json alts = json::array();
        if (i < c.top.size())
          for (const auto& [id, lp] : c.top[i])
            alts.push_back({{"token", token_string(id)}, {"logprob", lp}, {"bytes", bytes_of(id)}});
        content.push_back({{"token", token_string(c.tokens[i])},
                           {"logprob", c.logprobs[i]},
                           {"bytes", bytes_of(c.tokens[i])},
                           {"top_logprobs", alts}});
      }
      return json{{"content", content}, {"refusal", nullptr}};
    }
    json toks = json::array(), lps = json::array(), offs = json::array(), tops = json::array();
    if (with_echo && !c.echo_tokens.empty()) {
      // The prompt's tokens first: the first has no logprob (nothing predicts it).
      size_t off = 0;
      for (size_t i = 0; i < c.echo_tokens.size(); ++i) {
        const int32_t id = c.echo_tokens[i];
        toks.push_back(token_string(id));
        offs.push_back(off);
        off += tok ? tok->token_piece(id).size() : 0;
        const TokenLogprob* lp = i > 0 && i - 1 < c.echo_logprobs.size() ? &c.echo_logprobs[i - 1] : nullptr;
        lps.push_back(lp ? json(lp->logprob) : json());
        tops.push_back(lp ? top_dict(lp->top) : json());
      }
    }
    for (size_t i = from; i < to; ++i) {
      toks.push_back(token_string(c.tokens[i]));
      lps.push_back(c.logprobs[i]);
      offs.push_back(c.offsets[i]);
      tops.push_back(i < c.top.size() ? top_dict(c.top[i]) : json::object());
    }
    return json{{"tokens", toks},
                {"token_logprobs", lps},
                {"top_logprobs", job.req.top_logprobs > 0 ? tops : json()},
                {"text_offset", offs}};
  }

  json usage_of(const Job& job) const {
    int64_t p = 0, g = 0, cached = 0;
    for (const auto& c : job.choices) {
      const size_t i = size_t(&c - job.choices.data());
      g += int64_t(c.tokens.size());
      if (i % size_t(job.req.n)) continue;  // n choices of one prompt: its tokens count once
      p += c.prompt_tokens ? c.prompt_tokens : int64_t(job.req.prompts[i].size());
      cached += c.cached_tokens;
    }
    return usage_json(p, g, cached);
  }

  json response_json(const Job& job) const {
    const bool chat = job.req.kind == ApiKind::Chat;
    json choices = json::array();
    for (size_t i = 0; i < job.choices.size(); ++i) {
      const Choice& c = job.choices[i];
      json ch = {{"index", i}};
      if (chat) {
        ch["message"] = {{"role", "assistant"}, {"content", c.full_text}};
        if (!c.calls.empty()) {
          // Blank text around the calls is no answer of its own (OpenAI sends null content with calls).
          if (c.full_text.find_first_not_of(" \t\r\n") == std::string::npos) ch["message"]["content"] = nullptr;
          ch["message"]["tool_calls"] = tool_calls_json(c, 0, false);
        }
        if (c.reasoning)
          ch["message"]["reasoning_content"] = c.full_reasoning.empty() ? json() : json(c.full_reasoning);
      }
      else
        ch["text"] = c.echo_text + c.full_text;
      ch["logprobs"] = logprobs_json(job, c, 0, c.tokens.size(), true);
      ch["finish_reason"] = c.finish_reason;
      ch["token_ids"] = c.tokens;
      choices.push_back(std::move(ch));
    }
    return json{{"id", job.id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", job.created},
                {"model", job.req.model},
                {"choices", choices},
                {"usage", usage_of(job)}};
  }

  json chunk_base(const Job& job) const {
    return json{{"id", job.id},
                {"object", job.req.kind == ApiKind::Chat ? "chat.completion.chunk" : "text_completion"},
                {"created", job.created},
                {"model", job.req.model}};
  }

  // A stream chunk with choice i's unsent text and tokens (and its finish reason when done).
  json choice_chunk(const Job& job, Choice& c, size_t i, bool first_chat_chunk = false) const {
    json ch = {{"index", i}};
    if (job.req.kind == ApiKind::Chat) {
      json delta = json::object();
      if (first_chat_chunk) {
        delta["role"] = "assistant";
        delta["content"] = "";
      } else {
        if (!c.reasoning_delta.empty()) delta["reasoning_content"] = c.reasoning_delta;
        if (!c.delta.empty()) delta["content"] = c.delta;
        if (c.calls.size() > c.sent_calls) delta["tool_calls"] = tool_calls_json(c, c.sent_calls, true);
      }
      ch["delta"] = delta;
    } else {
      ch["text"] = c.echo_unsent ? c.echo_text + c.delta : c.delta;
    }
    const size_t to = first_chat_chunk ? c.sent_tokens : c.tokens.size();
    ch["logprobs"] = first_chat_chunk ? json() : logprobs_json(job, c, c.sent_tokens, to, c.echo_unsent);
    ch["finish_reason"] = (c.done && !first_chat_chunk) ? json(c.finish_reason) : json();
    ch["token_ids"] = std::vector<int32_t>(c.tokens.begin() + long(c.sent_tokens), c.tokens.begin() + long(to));
    if (!first_chat_chunk) {
      c.delta.clear();
      c.reasoning_delta.clear();
      c.sent_tokens = to;
      c.sent_calls = c.calls.size();
      c.echo_unsent = false;
    }
    json chunk = chunk_base(job);
    chunk["choices"] = json::array({ch});
    if (job.req.include_usage) chunk["usage"] = nullptr;
    return chunk;
  }

  // Runs a non-streamed job to the end; false when the client went away
  // (noticed within 200 ms; its requests are then cancelled).
  bool run_blocking(Job& job, const HttpExchange& out) {
    while (job.remaining > 0) {
      for (const Event& e : job.ch->take(std::chrono::milliseconds(200))) apply(job, e);
      if (job.remaining > 0 && out.client_gone()) {
        cancel_unfinished(job);
        return false;
      }
    }
    return true;
  }

  // Streams a job over SSE; false when the client went away.
  bool run_stream(Job& job, HttpExchange& out) {
    auto last_write = Clock::now();
    auto send = [&](const std::string& s) {
      last_write = Clock::now();
      return out.write(s);
    };
    auto send_json = [&](const json& j) { return send("data: " + dump(j) + "\n\n"); };
    auto gone = [&] {
      cancel_unfinished(job);
      return false;
    };
    if (job.req.kind == ApiKind::Chat)
      for (size_t i = 0; i < job.choices.size(); ++i)
        if (!send_json(choice_chunk(job, job.choices[i], i, true))) return gone();
    while (job.remaining > 0) {
      std::vector<Event> evs = job.ch->take(std::chrono::milliseconds(100));
      if (evs.empty()) {
        if (out.client_gone()) return gone();
        if (Clock::now() - last_write > std::chrono::seconds(opts.keepalive_seconds) && !send(": keep-alive\n\n"))
          return gone();
        continue;
      }
      std::vector<char> touched(job.choices.size(), 0);
      for (const Event& e : evs) {
        Choice& c = job.choices[size_t(e.choice)];
        const bool was_done = c.done;
        apply(job, e);
        if (was_done) continue;
        // One event per token: sent as it is applied, even when several arrived at once.
        if (job.req.token_events || !tok) {
          if (c.done || c.tokens.size() > c.sent_tokens)
            if (!send_json(choice_chunk(job, c, size_t(e.choice)))) return gone();
        } else {
          touched[size_t(e.choice)] = 1;
        }
      }
      for (size_t i = 0; i < job.choices.size(); ++i) {
        Choice& c = job.choices[i];
        if (!touched[i]) continue;
        // Text requests: tokens without text yet ride along with the next text.
        if (c.done || !c.delta.empty() || !c.reasoning_delta.empty() || c.calls.size() > c.sent_calls ||
            c.echo_unsent)
          if (!send_json(choice_chunk(job, c, i))) return gone();
      }
    }
    if (job.req.include_usage) {
      json u = chunk_base(job);
      u["choices"] = json::array();
      u["usage"] = usage_of(job);
      if (!send_json(u)) return gone();
    }
    if (!send("data: [DONE]\n\n")) return gone();
    out.end_stream();
    return true;
  }

  // ------------------------------------------------------------------ routes

  void handle_generate(const HttpRequest& http, HttpExchange& out, ApiKind kind) {
    HttpResponse res;
    try {
      if (draining) throw ApiError(503, "the server is shutting down", "", "", "server_error");
      if (http.body.size() > opts.max_body_bytes)
        throw ApiError(413, fmt::format("the request body exceeds the limit of {} bytes", opts.max_body_bytes));
      auto job = std::make_shared<Job>();
      job->arrival = Clock::now();
      job->guard = std::make_unique<ActiveGuard>(this);
      job->req = parse_request(kind, http.body, ctx);
      job->id = make_id(kind == ApiKind::Chat ? "chatcmpl-" : "cmpl-");
      job->created = int64_t(std::time(nullptr));
      // Non-streamed requests wake their thread only at the end, unless a stop string must be watched.
      job->ch->wake_each = job->req.stream || !job->req.stop.empty();
      submit_all(*job);
      if (!job->req.stream) {
        if (!run_blocking(*job, out)) {
          metrics->count_http(499);  // nginx's "client closed request": nothing is sent
          return;
        }
        res.set_content(dump(response_json(*job)), "application/json");
        out.respond(std::move(res));
        return;
      }
      if (out.start_stream(200, {{"Content-Type", "text/event-stream"},
                                 {"Cache-Control", "no-cache"},
                                 {"X-Accel-Buffering", "no"}})) {
        try {
          run_stream(*job, out);
        } catch (const std::exception& e) {  // nothing can be answered any more: the stream ends unfinished
          std::fprintf(stderr, "mxserve: stream %s failed: %s\n", job->id.c_str(), e.what());
        }
      }
      cancel_unfinished(*job);  // what still runs when the client went away or the stream failed
    } catch (const ApiError& e) {
      send_error(res, e);
      out.respond(std::move(res));
    }
  }

  json model_json() const {
    return json{{"id", opts.served_model_name},
                {"object", "model"},
                {"created", int64_t(std::time(nullptr))},
                {"owned_by", "mxserve"},
                {"max_model_len", ctx.context_length},
                // mxserve's own field: the ids a token-id prompt may use, so a load
                // generator (mxserve bench --url) needs no --vocab against this server.
                {"vocab_size", engine.config().vocab_size}};
  }

  void setup_routes() {
    // DNS rebinding: a loopback server answers only requests for loopback names (access.h).
    opts.access.check_host = is_loopback_host(opts.host);
    HttpTransportOptions t;
    t.host = opts.host;
    t.port = opts.port;
    t.workers = std::max(1, opts.http_threads);
    t.max_body_bytes = opts.max_body_bytes;
    t.limits = opts.http_limits;
    t.error_body = [](int status, const std::string& msg) {
      return dump(error_body(msg, status >= 500 ? "server_error" : "invalid_request_error"));
    };
    t.on_response = [m = metrics](int status) { m->count_http(status); };
    http = std::make_unique<HttpTransport>(std::move(t), [this](const HttpRequest& q, HttpExchange& out) { route(q, out); });
  }

  void route(const HttpRequest& q, HttpExchange& out) {
    static const std::vector<Route> routes = {{"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"},
                                              {"GET", "/v1/models"},       {"GET", "/v1/models/*"},
                                              {"GET", "/health"},          {"GET", "/metrics"}};
    HttpResponse r;
    if (reject_request(q, r, opts.access, routes)) {
      out.respond(std::move(r));
      return;
    }
    const bool get = q.method == "GET" || q.method == "HEAD";
    const std::string models = "/v1/models/";
    if (q.method == "POST" && q.path == "/v1/completions") return handle_generate(q, out, ApiKind::Completion);
    if (q.method == "POST" && q.path == "/v1/chat/completions") return handle_generate(q, out, ApiKind::Chat);
    if (get && q.path == "/v1/models") {
      r.set_content(dump(json{{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    } else if (get && q.path.size() > models.size() && q.path.compare(0, models.size(), models) == 0) {
      const std::string id = q.path.substr(models.size());
      if (id == opts.served_model_name)
        r.set_content(dump(model_json()), "application/json");
      else
        send_error(r, 404,
                   error_body(fmt::format("The model '{}' does not exist", id), "invalid_request_error", "model",
                              "model_not_found"));
    } else if (get && q.path == "/health") {
      if (draining)
        send_error(r, 503, error_body("the server is shutting down", "server_error"));
      else
        r.set_content(R"({"status":"ok"})", "application/json");
    } else if (get && q.path == "/metrics") {
      r.set_content(metrics->render(engine.metrics(), kernel_fallback_count()), "text/plain; version=0.0.4");
    } else {
      send_error(r, 404,
                 error_body(fmt::format("no route for {} {}", q.method, q.path), "invalid_request_error", "",
                            "not_found"));
    }
    out.respond(std::move(r));
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer* tokenizer, ServerOptions opts)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(opts))) {}

HttpServer::~HttpServer() {
  if (impl_->run_started && !impl_->run_done) shutdown(std::chrono::milliseconds(0));
  impl_->http->stop(std::chrono::milliseconds(0));  // no handler runs past here
}

int HttpServer::bind() {
  Impl& m = *impl_;
  m.port = m.http->bind();  // mx::Error when it cannot
  return m.port;
}

void HttpServer::run() {
  Impl& m = *impl_;
  MX_CHECK(m.port > 0, "HttpServer::run: bind() first");
  m.run_started = true;
  if (!m.stopped) m.http->run();
  m.run_done = true;
}

void HttpServer::shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  m.draining = true;
  {
    std::unique_lock<std::mutex> lk(m.live_mu);
    if (!m.live_cv.wait_for(lk, drain, [&] { return m.active == 0; })) {
      const std::set<uint64_t> ids = m.live_ids;
      lk.unlock();
      for (uint64_t id : ids) m.engine.cancel(id);
      lk.lock();
      m.live_cv.wait_for(lk, std::chrono::seconds(5), [&] { return m.active == 0; });
    }
  }
  m.stopped = true;
  m.http->stop();  // answers being written finish (up to 2 s), then run() returns
  while (m.run_started && !m.run_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

int HttpServer::port() const { return impl_->port; }

int HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lk(impl_->live_mu);
  return impl_->active;
}

ServerMetrics& HttpServer::metrics() { return *impl_->metrics; }

}  // namespace mx::server
