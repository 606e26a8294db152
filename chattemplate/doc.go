// Package chattemplate renders a conversation into the prompt text a model was
// trained on, with the model's own chat template: the Jinja source a GGUF file
// carries in `tokenizer.chat_template`, or a Hugging Face tokenizer_config.json in
// `chat_template`.
//
// Templates are compiled and run by github.com/ardanlabs/jinja, a pure-Go Jinja
// written for chat templates. Rendering follows transformers' apply_chat_template,
// the reference every template is written against: trim_blocks and lstrip_blocks
// are on; the template sees `messages` (a list of {role, content}),
// `add_generation_prompt`, `bos_token`, `eos_token`, `tools` (none, or the
// OpenAI tool objects given to [Template.RenderTools], object keys in the client's
// order), `documents` (none), `raise_exception(msg)` and `strftime_now(fmt)`. An
// assistant message with calls has `tool_calls` ({id, type, function: {name,
// arguments}}, the arguments an object as Hugging Face templates expect); a tool
// message has `tool_call_id`; neither key is present otherwise, since templates
// test `'tool_calls' in message`.
//
// The rendered text is the whole prompt: a template that writes bos_token at its
// start (Llama 2 and 3, Mistral, Gemma) puts the BOS text there, so the caller
// tokenizes it with special tokens parsed and does not add a second BOS (as
// transformers does with add_special_tokens=False; llama.cpp instead strips the
// leading BOS text when the tokenizer adds one).
//
// # The fallback
//
// A model without a template gets [Fallback]: a plain transcript, one line per
// message with the role capitalised, ending with "Assistant:" when a reply is
// wanted:
//
//	System: You are terse.
//	User: Hello
//	Assistant: Hi.
//	User: Why is the sky blue?
//	Assistant:
//
// llama.cpp falls back to ChatML instead. ChatML's `<|im_start|>` markers only mean
// something to a model whose vocabulary has them as special tokens and that was
// tuned on them; a model that ships without a template is most often a base model
// (tandem's default, stories260K, is one), for which the markers are a run of odd
// sub-word pieces it has never seen, while a transcript of named speakers is text it
// has read. The prompt ends at the colon, without a space, because SentencePiece
// and byte-level BPE vocabularies put the space at the start of the next word.
// Nothing is written for BOS or EOS: the tokenizer adds BOS as the model's settings
// say. The fallback's [Template.StopStrings] end a reply where the model starts
// writing the next speaker's line.
//
// # Bounds
//
// A template is a program from the model file. Whatever it does, Render returns:
// a panic in the library becomes an error, and a run is stopped with an error
// wrapping [ErrLimit] past 262,144 loop iterations and macro calls (range() items
// count too), 64 nested macro calls, or ten seconds. The library offers no hook
// inside a loop or a macro, so New inserts an inert call at the top of every loop
// body, around every macro body and after every set (see rewrite.go). The library
// prints values by recursion, so a value that contains itself would overflow the
// Go stack, a fatal error no recover catches: the methods that change a list or
// dict in place (append, pop, insert, update) fail, as in transformers' sandbox,
// and a set that puts a namespace inside itself, nests a value more than 128 deep
// or makes one of more than 262,144 lists and dicts once printed fails too. New
// refuses a template over 256 KiB or nesting blocks or brackets more than 128
// deep, which the library's recursive parser could not take. What cannot be
// bounded this way is one huge allocation: `'x' * 10**11`, `indent(10**11)`, or a
// string doubled in a loop 40 times exhausts memory before the next check.
//
// # Where the library falls short, and what this package does about it
//
// New rewrites the source before the library compiles it (rewrite.go) so that
// whitespace control ({%- -%}, trim_blocks, lstrip_blocks, the dropped final
// newline), Python string escapes ('\u00e9'), "}}" inside brackets and the order
// of the keys of dict(a=1, b=2) (the library's is random) behave as in Jinja;
// raise_exception, strftime_now and range are this package's. Of 71
// distinct real templates tried (testdata/ and the test suites of huggingface.js
// and ardanlabs/jinja), 64 give Jinja2's text, or its refusal, on each of ten
// conversations; 3 differ only on a "tool" message without the fields they expect,
// where Jinja2 raises on arithmetic with an undefined value and the library goes
// on; 3 are tool-calling variants Jinja2 cannot render without tools; and AI21
// Jamba's does not compile (it calls a macro with *args).
// What remains, and cannot be added through the library's globals:
//
//   - Printing: none prints as "" (Jinja: "None"), 1.0 as "1", a tuple as a list.
//   - Missing: the string methods rsplit, splitlines, join, index, isspace and the
//     other is* methods, and split's maxsplit; the filters center, truncate,
//     format, wordwrap, groupby and a few others; the test divisibleby; calls with
//     *args or **kwargs (AI21 Jamba's template does not compile); float literals
//     such as 1e3; int * string.
//   - tojson(indent=n) sorts keys and escapes <, > and & (Jinja keeps insertion
//     order and the characters): Llama 3.1 and 3.2 write tools that way, so their
//     tool prompts would differ once tools are passed. Plain tojson is exact.
//   - Undefined values: the library iterates none as an empty list and adds an
//     undefined value as "", where Jinja raises.
package chattemplate
