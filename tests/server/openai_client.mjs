// The official OpenAI client (npm "openai") against specdec serve: a streamed chat (its chunks'
// fields, usage in exactly one chunk), a completion that is not streamed (generate's greedy text,
// usage with cached tokens), n = 2 choices with log-probabilities, structured output (response_format
// json_schema), tools (a named and a required tool_choice read from message.tool_calls, a stream put
// together by the client's own ChatCompletionStream, the call and its result sent back), a model by id,
// and errors (a field specdec refuses, a wrong API key, an unknown model) as the client's own error classes.
// Usage: node openai_client.mjs BASE_URL API_KEY EXPECTED_COMPLETION_TEXT
import OpenAI from 'openai';

const [baseURL, apiKey, expected] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let failed = 0;
const check = (name, ok, detail) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} openai client: ${name}${ok || detail === undefined ? '' : `: ${detail}`}`);
  if (!ok) failed++;
};

// a streamed chat: the deltas come as the client's chunk objects, the last with finish_reason
const stream = await client.chat.completions.create({
  model: 'stories260K',
  messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me a story.' }],
  max_tokens: 24,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
let text = '', role = '', finish = null, chunks = 0, usage = null, usages = 0, shape = true, ids = new Set();
for await (const chunk of stream) {
  chunks++;
  ids.add(chunk.id);
  shape &&= chunk.object === 'chat.completion.chunk' && chunk.model === 'stories260K' && typeof chunk.created === 'number' &&
            /^chatcmpl-[A-Za-z0-9]{24}$/.test(chunk.id) && 'usage' in chunk;
  if (chunk.usage) {
    usage = chunk.usage;
    usages++;
  }
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) role = c.delta.role;
  if (c.delta.content) text += c.delta.content;
  if (c.finish_reason) finish = c.finish_reason;
}
check('streamed chat', role === 'assistant' && text.length > 0 && finish === 'length' && chunks > 3,
      JSON.stringify({ role, text, finish, chunks }));
check('streamed chat usage, in one chunk', usages === 1 && usage.completion_tokens === 24 &&
      usage.total_tokens === usage.prompt_tokens + 24, JSON.stringify({ usage, usages }));
check('streamed chat chunks: one id, OpenAI\'s fields', shape && ids.size === 1, JSON.stringify([...ids]));

// a completion, not streamed: the greedy text specdec generate gives for the same prompt
const c = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 32, temperature: 0 });
check('completion', c.object === 'text_completion' && c.choices[0].text === expected && c.choices[0].finish_reason === 'length' &&
      c.usage.completion_tokens === 32 && c.usage.prompt_tokens_details?.cached_tokens >= 0, JSON.stringify([c.choices[0], c.usage]));
// the same prompt again: its slot holds it, and the usage says so
const c2 = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
check('cached tokens', c2.usage.prompt_tokens_details?.cached_tokens > 0, JSON.stringify(c2.usage));

// structured output: response_format json_schema, strict, as the client sends it; the content parses
// and holds to the schema (the client's own check of it is up to the caller)
const person = {
  type: 'object', additionalProperties: false, required: ['name', 'age'],
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 1, maximum: 99 } },
};
const isPerson = (o) => o && typeof o === 'object' && Object.keys(o).sort().join() === 'age,name' &&
  typeof o.name === 'string' && [...o.name].length <= 10 && Number.isInteger(o.age) && o.age >= 1 && o.age <= 99;
for (const temperature of [0, 1]) {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: [{ role: 'user', content: 'Who is she?' }], max_tokens: 100, temperature, seed: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } },
  });
  let parsed = null;
  try { parsed = JSON.parse(r.choices[0].message.content); } catch { /* reported below */ }
  check(`response_format json_schema, temperature ${temperature}`, isPerson(parsed) && r.choices[0].finish_reason === 'stop',
        JSON.stringify(r.choices[0]));
}

// tools: the call is in message.tool_calls, finish_reason tool_calls, the arguments JSON valid against
// the function's parameters (stories260K writes ChatML's Hermes-style <tool_call> blocks, constrained)
const weather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city', strict: true,
    parameters: { type: 'object', additionalProperties: false, required: ['city', 'days'],
                  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } } },
  },
};
const clock = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', additionalProperties: false,
                                                                               required: ['zone'], properties: { zone: { enum: ['UTC', 'CET'] } } } } };
const validArgs = (call) => {
  let a;
  try { a = JSON.parse(call.function.arguments); } catch { return false; }
  if (call.function.name === 'get_time') return Object.keys(a).join() === 'zone' && ['UTC', 'CET'].includes(a.zone);
  return call.function.name === 'get_weather' && Object.keys(a).sort().join() === 'city,days' && typeof a.city === 'string' &&
    [...a.city].length <= 12 && Number.isInteger(a.days) && a.days >= 1 && a.days <= 7;
};
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const named = { type: 'function', function: { name: 'get_weather' } };
const toolReq = { model: 'stories260K', messages: ask, tools: [weather, clock], max_tokens: 300, seed: 3, spec_sampling: 'coupled' };
let firstCall = null;
for (const [label, tool_choice] of [['named', named], ['required', 'required']]) {
  const r = await client.chat.completions.create({ ...toolReq, tool_choice, parallel_tool_calls: false });
  const c = r.choices[0], call = c.message.tool_calls?.[0];
  check(`tools, tool_choice ${label}: message.tool_calls`, c.finish_reason === 'tool_calls' && c.message.content === null &&
        c.message.tool_calls.length === 1 && call.type === 'function' && /^call_[A-Za-z0-9]{24}$/.test(call.id) &&
        (label !== 'named' || call.function.name === 'get_weather') && validArgs(call), JSON.stringify(c));
  if (label === 'named') firstCall = c;
}
// streamed: the client's own ChatCompletionStream puts delta.tool_calls together into the same call
const cs = client.chat.completions.stream({ ...toolReq, tool_choice: named, parallel_tool_calls: false });
const sf = (await cs.finalChatCompletion()).choices[0];
check('tools streamed, put together by the client', sf.finish_reason === 'tool_calls' && sf.message.tool_calls?.length === 1 &&
      sf.message.tool_calls[0].function.name === 'get_weather' &&
      sf.message.tool_calls[0].function.arguments === firstCall.message.tool_calls[0].function.arguments,
      JSON.stringify([sf, firstCall]));
// the call and its result sent back, as an agent loop does
const back = await client.chat.completions.create({
  model: 'stories260K', tools: [weather, clock], max_tokens: 8, temperature: 0,
  messages: [...ask, firstCall.message, { role: 'tool', tool_call_id: firstCall.message.tool_calls[0].id, content: '22 C, sunny' }],
});
check('a tool result sent back', typeof back.choices[0].message.content === 'string' && back.usage.prompt_tokens > 600,
      JSON.stringify([back.choices[0], back.usage]));

// errors: the client raises its own classes with the server's status and message
try {
  await client.completions.create({ model: 'stories260K', prompt: 'Once', logit_bias: { 5: 3 } });
  check('logit_bias refused', false, 'accepted');
} catch (e) {
  check('logit_bias refused', e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'logit_bias',
        `${e.constructor.name} ${e.status} ${e.message}`);
}

// n choices and log-probabilities as the client reads them
const n2 = await client.chat.completions.create({
  model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, n: 2, seed: 1,
  logprobs: true, top_logprobs: 3,
});
check('n = 2 with logprobs', n2.choices.length === 2 && n2.choices.every((ch, i) => ch.index === i &&
      ch.logprobs.content.length === 12 && ch.logprobs.content.map((e) => e.token).join('') === ch.message.content &&
      ch.logprobs.content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3)) && n2.usage.completion_tokens === 24,
      JSON.stringify(n2.choices.map((ch) => [ch.message.content, ch.logprobs?.content?.length])));
const lc = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 2 });
const l = lc.choices[0].logprobs;
check('completion logprobs', l.tokens.join('') === lc.choices[0].text && l.token_logprobs.length === 8 &&
      l.top_logprobs.every((d) => Object.keys(d).length >= 2) && l.text_offset[0] === 0, JSON.stringify(l));
try {
  await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 100000 });
  check('max_tokens past the context refused', false, 'accepted');
} catch (e) {
  check('max_tokens past the context refused', e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded',
        `${e.constructor.name} ${e.status} ${e.code} ${e.message}`);
}
try {
  await new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).models.list();
  check('wrong API key refused', false, 'accepted');
} catch (e) {
  check('wrong API key refused', e instanceof OpenAI.AuthenticationError && e.status === 401, `${e.constructor.name} ${e.status}`);
}
const models = await client.models.list();
check('models', models.data.length === 1 && models.data[0].id === 'stories260K', JSON.stringify(models.data));
const m = await client.models.retrieve('stories260K');
check('a model by id', m.id === 'stories260K' && m.object === 'model', JSON.stringify(m));
try {
  await client.models.retrieve('gpt-4o');
  check('an unknown model', false, 'found');
} catch (e) {
  check('an unknown model', e instanceof OpenAI.NotFoundError && e.code === 'model_not_found', `${e.constructor.name} ${e.status} ${e.code}`);
}
process.exit(failed ? 1 : 0);
