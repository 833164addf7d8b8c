// LangChain (npm "@langchain/openai") against specdec serve: ChatOpenAI's invoke and stream, each
// checking what LangChain reads (content, finish_reason, usage_metadata) and that a stream's usage
// is counted once (LangChain adds up every usage a stream carries); withStructuredOutput in its default
// mode (response_format json_schema), jsonMode (json_object) and functionCalling (a named tool);
// bindTools with tool_choice, invoked and streamed; a refused field raising.
// Usage: node langchain_client.mjs BASE_URL API_KEY [EXPECTED] [ZOO_URL]   (ZOO_URL: a server of a random-weight Qwen2)
import { ChatOpenAI } from '@langchain/openai';

const [baseURL, apiKey, , zooURL] = process.argv.slice(2);
const llm = new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 24,
                             maxRetries: 0, streamUsage: true });
let failed = 0;
const check = (name, ok, detail) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} langchain: ${name}${ok || detail === undefined ? '' : `: ${detail}`}`);
  if (!ok) failed++;
};

const msg = await llm.invoke([['system', 'You tell stories.'], ['human', 'Tell me a story.']]);
const u = msg.usage_metadata;
check('invoke', typeof msg.content === 'string' && msg.content.length > 0 && msg.response_metadata.finish_reason === 'length' &&
      u && u.output_tokens === 24 && u.input_tokens > 0 && u.total_tokens === u.input_tokens + 24,
      JSON.stringify({ content: msg.content, meta: msg.response_metadata, usage: u }));

let full;
for await (const chunk of await llm.stream([['system', 'You tell stories.'], ['human', 'Tell me a story.']]))
  full = full ? full.concat(chunk) : chunk;
const su = full.usage_metadata;
check('stream: the same text', full.content === msg.content, JSON.stringify({ streamed: full.content, invoked: msg.content }));
check('stream: usage counted once', su && su.output_tokens === 24 && su.input_tokens === u.input_tokens &&
      su.total_tokens === u.total_tokens, JSON.stringify(su));
check('stream: finish_reason', full.response_metadata.finish_reason === 'length', JSON.stringify(full.response_metadata));

// withStructuredOutput: the default mode for a model not named gpt-3/gpt-4 is jsonSchema (response_format
// json_schema); functionCalling sends the schema as a tool with a named tool_choice and parses the call
const person = {
  title: 'person', type: 'object', additionalProperties: false, required: ['name', 'age'],
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 1, maximum: 99 } },
};
const isPerson = (o) => o && typeof o.name === 'string' && [...o.name].length <= 10 && Number.isInteger(o.age) && o.age >= 1 && o.age <= 99;
const structured = () => new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 100, maxRetries: 0 });
for (const [label, options] of [['default mode', undefined], ['functionCalling', { method: 'functionCalling' }]]) {
  try {
    const o = await structured().withStructuredOutput(person, options).invoke('Who is she?');
    check(`withStructuredOutput (${label})`, isPerson(o), JSON.stringify(o));
  } catch (e) {
    check(`withStructuredOutput (${label})`, false, `${e.constructor.name} ${e.message}`);
  }
}
// jsonMode sends response_format json_object: any JSON object, which stories260K never closes (it writes
// its story inside the first key: none of 90 seeded tries at temperatures 1 to 2 ended within 200
// tokens), so the output is cut by max_tokens: the request goes out as json_object, the reply is the
// start of an object, and LangChain reports it unparsed (includeRaw: parsed null)
try {
  const r = await new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 24, maxRetries: 0 })
    .withStructuredOutput(person, { method: 'jsonMode', includeRaw: true }).invoke('Who is she?');
  check('withStructuredOutput (jsonMode): the start of an object, cut by max_tokens', r.parsed === null &&
        /^\s*\{\s*"/.test(r.raw.content) && r.raw.response_metadata.finish_reason === 'length', JSON.stringify(r.raw));
} catch (e) {
  check('withStructuredOutput (jsonMode)', false, `${e.constructor.name} ${e.message}`);
}
// ... and on a model whose objects close (a random-weight Qwen2, the optional third URL), jsonMode
// gives LangChain an object it parses (with a JSON Schema rather than zod it parses and does not
// validate, so any object is what json_object promises); several seeds and temperatures
if (zooURL) {
  for (const [temperature, seed] of [[0, 1], [1, 2], [1.5, 3]]) {
    try {
      const r = await new ChatOpenAI({ model: 'zoo', apiKey, configuration: { baseURL: zooURL }, temperature, maxTokens: 200,
                                       maxRetries: 0, modelKwargs: { seed } })
        .withStructuredOutput(person, { method: 'jsonMode', includeRaw: true }).invoke('Who is she?');
      const p = r.parsed;
      check(`withStructuredOutput (jsonMode), a model that closes its object, T ${temperature}: parsed`,
            p !== null && typeof p === 'object' && !Array.isArray(p) && r.raw.response_metadata.finish_reason === 'stop' &&
            JSON.stringify(JSON.parse(r.raw.content)) === JSON.stringify(p), JSON.stringify(r));
    } catch (e) {
      check(`withStructuredOutput (jsonMode), T ${temperature}`, false, `${e.constructor.name} ${e.message}`);
    }
  }
}

// bindTools: tool_choice "required" and a function's name, invoked and streamed; the call's args valid
const weather = { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
  parameters: { type: 'object', additionalProperties: false, required: ['city', 'days'],
                properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } } } } };
const validWeather = (a) => a && typeof a.city === 'string' && [...a.city].length <= 12 && Number.isInteger(a.days) && a.days >= 1 && a.days <= 7;
const agent = new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 300, maxRetries: 0 });
for (const tool_choice of ['required', 'get_weather']) {
  try {
    const bound = agent.bindTools([weather], { tool_choice, parallel_tool_calls: false });
    const m = await bound.invoke('What is the weather in Paris?');
    const call = m.tool_calls?.[0];
    check(`bindTools, tool_choice ${tool_choice}`, m.tool_calls.length === 1 && call.name === 'get_weather' && validWeather(call.args) &&
          /^call_/.test(call.id) && m.response_metadata.finish_reason === 'tool_calls', JSON.stringify({ tool_calls: m.tool_calls, meta: m.response_metadata }));
    let all;
    for await (const chunk of await bound.stream('What is the weather in Paris?')) all = all ? all.concat(chunk) : chunk;
    check(`bindTools, tool_choice ${tool_choice}: streamed alike`, all.tool_calls?.length === 1 &&
          JSON.stringify(all.tool_calls[0].args) === JSON.stringify(call.args) && all.tool_calls[0].name === 'get_weather',
          JSON.stringify({ streamed: all.tool_calls, invoked: m.tool_calls }));
  } catch (e) {
    check(`bindTools, tool_choice ${tool_choice}`, false, `${e.constructor.name} ${e.message}`);
  }
}

try {
  await new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, maxRetries: 0, modelKwargs: { mirostat: 2 } }).invoke('Hi');
  check('a refused field raises', false, 'accepted');
} catch (e) {
  check('a refused field raises', e.status === 400 && /mirostat/.test(e.message), `${e.constructor.name} ${e.status} ${e.message}`);
}
process.exit(failed ? 1 : 0);
