// Package toolcall reads the tool calls a chat model writes and builds the
// constraint that makes it write one.
//
// Models trained for tools write a call in their family's own format, the one
// their chat template shows them:
//
//   - Hermes (Qwen 2.5, Qwen 3, Hermes): `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`,
//     one such block per call, several for parallel calls.
//   - Llama 3.x: `{"name": "f", "parameters": {...}}` as the whole reply,
//     optionally after `<|python_tag|>`.
//   - Mistral: `[TOOL_CALLS]` then a JSON list `[{"name": "f", "arguments": {...}}, ...]`.
//
// A [Parser] reads a whole reply ([Parser.Parse]) or a stream of text pieces
// ([Parser.Stream]), splitting it into content and calls; [Detect] names the
// family a chat template's text belongs to; [Parser.Constraint] is the literal
// text and JSON Schema that constrained decoding holds the model to when the
// client requires a call. A reply that starts a call and does not finish it in
// the family's format is a parse failure: the text is returned as content and
// the caller counts it.
package toolcall
