#pragma once
// The model families' real chat templates, byte for byte as their Hugging Face
// tokenizer_config.json / chat_template.jinja have them. Defined in a .cpp that
// CMake generates at configure time from data/chat_templates/*.jinja
// (sources in SOURCES.md there; the list of files is MX_EMBEDDED_CHAT_TEMPLATES
// in CMakeLists.txt), so the files stay the one copy. Used by make-test-model
// (devtools/synthetic.cpp) for the tokenizer_config.json it writes.

namespace mx {

extern const char kLlama3Template[];       // meta-llama-Llama-3.3-70B-Instruct.jinja (Llama-3.1/3.3)
extern const char kQwen25Template[];       // Qwen-Qwen2.5-7B-Instruct.jinja
extern const char kQwen3Template[];        // Qwen-Qwen3-0.6B.jinja (Qwen3 dense and MoE)
extern const char kGlm45Template[];        // zai-org-GLM-4.5.jinja
extern const char kDeepseekV31Template[];  // deepseek-ai-DeepSeek-V3.1.jinja

}  // namespace mx
