#pragma once
// JSON Schema -> grammar (grammar/grammar.h) whose sentences are JSON texts that
// validate against the schema: what structured outputs constrain decoding to
// (OpenAI's response_format json_schema; vLLM's guided_json; llama.cpp's
// json-schema-to-grammar, whose choices this follows where the schema leaves
// the text open).
//
// Supported (JSON Schema 2020-12 keywords): type (one or a list), enum, const,
// anyOf, oneOf (as anyOf: the alternatives of real schemas are disjoint),
// allOf of one schema, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion
// included); objects: properties, required, additionalProperties (absent means
// false, as OpenAI's strict mode requires, so the output holds only the listed
// properties, in the schema's order; true or a schema allows further members);
// arrays: items, prefixItems, minItems, maxItems; strings: minLength, maxLength,
// format date, time, date-time, uuid, pattern (grammar/regex.h's syntax,
// searched as ECMA-262 does: anchored only by its own ^ / $; a '"' or '\\' it
// matches is written escaped, control characters never); number, integer,
// boolean, null. enum and const keep only the values the keywords beside them
// admit as this compiler reads them (a "type" alone as JSON Schema defines it; none
// left is an error, as is a "type" of []); keywords beside anyOf, oneOf or allOf
// apply to each alternative; beside $ref they are an error.
// Annotations (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, strict) are ignored. Anything else
// (minimum, multipleOf, other formats, ...) is an mx::Error naming the keyword and
// where it is, so a request gets a 400 rather than an output that ignores part of
// its schema.
//
// The text is JSON with optional whitespace between tokens limited to one space,
// or a newline and up to 20 spaces of indentation, and numbers of at most 16
// integral digits (fraction 16, exponent 3), as llama.cpp's json-schema-to-grammar
// bounds them, so a model cannot loop on whitespace or digits forever.
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace mx::grammar {

Grammar json_schema_grammar(const nlohmann::ordered_json& schema);
// Adds the rules of the schema's JSON texts to g and returns the rule that
// derives them (g's root is left as it is), to embed a schema in a larger
// grammar (tool calls: server/tool_calls.h). refs_root: the document "#" refers
// to in $ref (default: the schema itself).
uint32_t add_json_schema(Grammar& g, const nlohmann::ordered_json& schema,
                         const nlohmann::ordered_json* refs_root = nullptr);
// response_format {"type": "json_object"}: any JSON object.
Grammar json_object_grammar();

}  // namespace mx::grammar
