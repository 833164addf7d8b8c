// Checks every finished output of sd_tool_gen, and every one the token budget cut, closed by the
// grammar's shortest completion ("closed"), on its own: the text read as calls by the syntax's
// fixed form (Hermes: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call> blocks, one per
// line; Llama 3: {"name": "NAME", "parameters": ARGS}), each ARGS parsed by JSON.parse and validated
// by ajv (draft-07, 2020-12 or draft-04 by the schema's keywords, with ajv-formats) against its
// function's schema; the calls the C parser reported must be the same (names and argument text).
// Prints each failure and a summary; exit 1 when any output fails, or is neither finished nor
// closed, or a schema has no output checked.
// Usage: node validate_tools.mjs SCHEMAS.json OUTPUTS.jsonl
import fs from 'node:fs';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import AjvDraft04 from 'ajv-draft-04';

const [schemasPath, outputsPath] = process.argv.slice(2);
const schemas = JSON.parse(fs.readFileSync(schemasPath, 'utf8'));
const opts = { strict: false, allErrors: true, validateFormats: true };
const draft7 = new Ajv(opts), draft2020 = new Ajv2020(opts), draft4 = new AjvDraft04(opts);
for (const a of [draft7, draft2020, draft4]) {
  addFormats(a);
  a.addFormat('int32', { type: 'number', validate: (x) => Number.isInteger(x) && x >= -2147483648 && x <= 2147483647 });
  for (const f of ['int64', 'float', 'double']) a.addFormat(f, { type: 'number', validate: () => true });
}
const usesDraft4 = (s) => /"exclusive(Minimum|Maximum)":(true|false)/.test(JSON.stringify(s));
const uses2020 = (s) => /"(prefixItems|\$defs|dependentRequired|unevaluated\w+)"/.test(JSON.stringify(s));
const compile = (raw) => {
  const s = JSON.parse(JSON.stringify(raw));
  delete s.$schema;
  return (usesDraft4(raw) ? draft4 : uses2020(raw) ? draft2020 : draft7).compile(s);
};
const validators = new Map();
const other = compile({ type: 'object', properties: { q: { type: 'string', maxLength: 6 } }, required: ['q'], additionalProperties: false });

// The calls of a text by the syntax's fixed form, or an error.
function readCalls(syntax, text) {
  if (syntax === 'llama3') {
    const m = /^\{"name": "([A-Za-z0-9_-]+)", "parameters": ([\s\S]*)\}$/.exec(text);
    if (!m) throw new Error('not {"name": ..., "parameters": ...}');
    return [{ name: m[1], arguments: m[2] }];
  }
  const calls = [];
  let at = 0;
  for (;;) {
    const head = /^<tool_call>\n\{"name": "([A-Za-z0-9_-]+)", "arguments": /.exec(text.slice(at));
    if (!head) throw new Error(`no call at ${at}`);
    at += head[0].length;
    const end = text.indexOf('}\n</tool_call>', at);
    if (end < 0) throw new Error('a call not closed');
    calls.push({ name: head[1], arguments: text.slice(at, end) });
    at = end + '}\n</tool_call>'.length;
    if (at === text.length) return calls;
    if (text[at] !== '\n') throw new Error(`text after a call at ${at}`);
    at++;
  }
}

let checked = 0, invalid = 0, cut = 0, closed = 0, calls = 0;
const per = {};
const perSchema = new Map();
for (const line of fs.readFileSync(outputsPath, 'utf8').split('\n')) {
  if (!line) continue;
  const o = JSON.parse(line);
  const key = `${o.model} ${o.syntax} ${o.mode}`;
  per[key] ??= { finished: 0, closed: 0, cut: 0, calls: 0 };
  if (!o.finished && o.closed === undefined) {
    cut++;
    per[key].cut++;
    continue;
  }
  if (o.finished) per[key].finished++;
  else {
    closed++;
    per[key].closed++;
  }
  checked++;
  if (o.model !== 'control') perSchema.set(o.schema, (perSchema.get(o.schema) ?? 0) + 1);
  let why = '';
  try {
    // auto: the calls follow the lead's text (Hermes) or whitespace (Llama 3), as the reader skips them
    const from = o.mode !== 'auto' ? 0 : o.syntax === 'hermes' ? o.text.indexOf('<tool_call>') : o.text.search(/\S/);
    const got = readCalls(o.syntax, o.text.slice(Math.max(from, 0)));
    if (JSON.stringify(got) !== JSON.stringify(o.calls)) why = `the C parser read ${JSON.stringify(o.calls)}`;
    if (o.mode !== 'required' && o.mode !== 'auto' && got.length !== 1) why ||= `${got.length} calls where one is allowed`;
    for (const c of got) {
      const v = c.name === 'other' ? other : c.name === `f${o.schema}` ? (validators.get(o.schema) ??
        validators.set(o.schema, compile(schemas[o.schema].schema)).get(o.schema)) : null;
      if (!v) { why ||= `an unknown function ${c.name}`; continue; }
      if (o.mode === 'named' && c.name !== `f${o.schema}`) why ||= `${c.name} called, f${o.schema} named`;
      if (!v(JSON.parse(c.arguments))) why ||= `${c.name}: ${JSON.stringify(v.errors)}`;
      calls++;
      per[key].calls++;
    }
  } catch (err) {
    why = err.message;
  }
  if (why) {
    invalid++;
    console.log(`INVALID: schema ${o.schema} (${schemas[o.schema].name}) ${key} seed ${o.seed}: ${why}\n  ${JSON.stringify(o.text)}`);
  }
}
for (const [k, c] of Object.entries(per))
  console.log(`${k}: ${c.finished} finished, ${c.closed} cut by the token budget and closed (${c.calls} calls), ${c.cut} neither`);
// the schemas given as functions: the object schemas (sd_tool_gen skips the others)
const isControl = Object.keys(per).every((k) => k.startsWith('control'));
const seen = new Set(fs.readFileSync(outputsPath, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).schema));
const unchecked = isControl ? [] : [...seen].filter((i) => !perSchema.get(i)).map((i) => `${i} (${schemas[i].name})`);
if (unchecked.length) console.log(`FAIL: no output checked for schema ${unchecked.join(', ')}`);
console.log(`ajv: ${checked} outputs (${calls} calls) checked (${closed} of them closed), ${invalid} invalid, ${cut} neither finished nor closed`);
process.exit(invalid || cut || !checked || unchecked.length ? 1 : 0);
