// Checks every output of sd_grammar_gen against its schema with ajv (draft-07, or draft 2020-12 for
// schemas using its keywords, draft-04 for boolean exclusive bounds) and ajv-formats: the finished
// ones, and those the token budget cut, closed by the grammar's shortest completion ("closed"); prints
// each invalid output and a summary; exit 1 when any output is invalid, or neither finished nor
// closed, or a schema has no output checked.
// Usage: node validate.mjs SCHEMAS.json OUTPUTS.jsonl
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
  // OpenAPI's numeric formats: int32 is a range (the grammar bounds it), the others say nothing
  a.addFormat('int32', { type: 'number', validate: (x) => Number.isInteger(x) && x >= -2147483648 && x <= 2147483647 });
  for (const f of ['int64', 'float', 'double']) a.addFormat(f, { type: 'number', validate: () => true });
}
const usesDraft4 = (s) => /"exclusive(Minimum|Maximum)":(true|false)/.test(JSON.stringify(s));
const uses2020 = (s) => /"(prefixItems|\$defs|dependentRequired|unevaluated\w+)"/.test(JSON.stringify(s));
const validators = schemas.map((e) => {
  const raw = e.schema;
  const s = typeof raw === 'object' && raw !== null ? JSON.parse(JSON.stringify(raw)) : raw;
  if (typeof s === 'object' && s !== null) delete s.$schema; // the class is chosen here
  return (usesDraft4(raw) ? draft4 : uses2020(raw) ? draft2020 : draft7).compile(s);
});
let checked = 0, invalid = 0, cut = 0, closed = 0;
const perModel = {};
const perSchema = new Array(schemas.length).fill(0);
for (const line of fs.readFileSync(outputsPath, 'utf8').split('\n')) {
  if (!line) continue;
  const o = JSON.parse(line);
  perModel[o.model] ??= { finished: 0, closed: 0, cut: 0 };
  if (!o.finished && o.closed === undefined) {
    cut++;
    perModel[o.model].cut++;
    continue;
  }
  if (o.finished) perModel[o.model].finished++;
  else {
    closed++;
    perModel[o.model].closed++;
  }
  checked++;
  if (o.model !== 'control') perSchema[o.schema]++;
  let value, ok = false, why = '';
  try {
    value = JSON.parse(o.text);
    ok = validators[o.schema](value);
    if (!ok) why = JSON.stringify(validators[o.schema].errors);
  } catch (err) {
    why = 'not JSON: ' + err.message;
  }
  if (!ok) {
    invalid++;
    console.log(`INVALID: schema ${o.schema} (${schemas[o.schema].name}) ${o.model} seed ${o.seed} temp ${o.temp}: ${why}\n  ${JSON.stringify(o.text)}`);
  }
}
for (const [m, c] of Object.entries(perModel))
  console.log(`${m}: ${c.finished} finished, ${c.closed} cut by the token budget and closed, ${c.cut} cut and not closed`);
const control = Object.keys(perModel).length === 1 && perModel.control;
const unchecked = control ? [] : perSchema.flatMap((n, i) => (n ? [] : [`${i} (${schemas[i].name})`]));
if (unchecked.length) console.log(`FAIL: no output checked for schema ${unchecked.join(', ')}`);
console.log(`ajv: ${checked} outputs checked (${closed} of them closed), ${invalid} invalid, ${cut} neither finished nor closed`);
process.exit(invalid || cut || !checked || unchecked.length ? 1 : 0);
