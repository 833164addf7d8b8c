// LangChain (npm "@langchain/openai") against specdec serve: ChatOpenAI's invoke and stream, each
// checking what LangChain reads (content, finish_reason, usage_metadata) and that a stream's usage
// is counted once (LangChain adds up every usage a stream carries), withStructuredOutput by a JSON
// Schema, a refused field raising. Usage: node
// langchain_client.mjs BASE_URL API_KEY
import { ChatOpenAI } from '@langchain/openai';

const [baseURL, apiKey] = process.argv.slice(2);
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

// withStructuredOutput by JSON Schema: LangChain sends response_format json_schema and parses the reply
const person = {
  title: 'person', type: 'object', additionalProperties: false, required: ['name', 'age'],
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 1, maximum: 99 } },
};
try {
  const o = await new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 100,
                                   maxRetries: 0 }).withStructuredOutput(person, { method: 'jsonSchema', strict: true })
    .invoke('Who is she?');
  check('withStructuredOutput (jsonSchema)', o && typeof o.name === 'string' && Number.isInteger(o.age), JSON.stringify(o));
} catch (e) {
  check('withStructuredOutput (jsonSchema)', false, `${e.constructor.name} ${e.message}`);
}

try {
  await new ChatOpenAI({ model: 'stories260K', apiKey, configuration: { baseURL }, maxRetries: 0, modelKwargs: { mirostat: 2 } }).invoke('Hi');
  check('a refused field raises', false, 'accepted');
} catch (e) {
  check('a refused field raises', e.status === 400 && /mirostat/.test(e.message), `${e.constructor.name} ${e.status} ${e.message}`);
}
process.exit(failed ? 1 : 0);
