// The AI SDK (npm "ai" with "@ai-sdk/openai-compatible") against specdec serve: generateText and
// streamText on the chat model, generateText on the completion model, each checking what the SDK
// reads (text, finishReason, usage, cached input tokens, the response's id and model), generateObject
// with a zod schema, generateText and streamText with a tool and toolChoice required (the SDK checks
// the call's input against the tool's zod schema), and an error the SDK raises from the server's 400.
// Usage: node aisdk_client.mjs BASE_URL API_KEY
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, generateObject, streamText, tool, APICallError } from 'ai';
import { z } from 'zod';

const [baseURL, apiKey] = process.argv.slice(2);
const provider = createOpenAICompatible({ name: 'specdec', baseURL, apiKey, includeUsage: true });
let failed = 0;
const check = (name, ok, detail) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ai sdk: ${name}${ok || detail === undefined ? '' : `: ${detail}`}`);
  if (!ok) failed++;
};
const show = (x) => JSON.stringify(x, (k, v) => (typeof v === 'bigint' ? Number(v) : v));

const chat = provider.chatModel('stories260K');
const g = await generateText({ model: chat, prompt: 'Tell me a story.', maxOutputTokens: 24, temperature: 0, maxRetries: 0 });
check('generateText (chat)', g.text.length > 0 && g.finishReason === 'length' && g.usage.outputTokens === 24 &&
      g.usage.inputTokens > 0 && g.usage.totalTokens === g.usage.inputTokens + 24 && /^chatcmpl-/.test(g.response.id) &&
      g.response.modelId === 'stories260K',
      show({ text: g.text, finishReason: g.finishReason, usage: g.usage, id: g.response.id, model: g.response.modelId }));

const s = streamText({ model: chat, prompt: 'Tell me a story.', maxOutputTokens: 24, temperature: 0, maxRetries: 0,
                       onError: ({ error }) => check('streamText error', false, String(error)) });
let streamed = '';
for await (const t of s.textStream) streamed += t;
const [finish, usage] = [await s.finishReason, await s.usage];
check('streamText (chat): the same text', streamed === g.text, show({ streamed, text: g.text }));
check('streamText (chat): finish and usage, counted once', finish === 'length' && usage.outputTokens === 24 &&
      usage.inputTokens === g.usage.inputTokens, show({ finish, usage }));

// the completion model writes the prompt as its own conversation text ("user:\n..."), so the
// text is the greedy continuation of that: compared with the server's own answer to it
const c = await generateText({ model: provider.completionModel('stories260K'), prompt: 'Once upon a time', maxOutputTokens: 32,
                               temperature: 0, maxRetries: 0 });
check('generateText (completion)', c.text.length > 0 && ['length', 'stop'].includes(c.finishReason) &&
      c.usage.outputTokens > 0 && c.usage.outputTokens <= 32 && c.usage.inputTokens > 4,
      show({ text: c.text, finishReason: c.finishReason, usage: c.usage }));

// a follow-up that extends the conversation: the reused prefix comes back as cached input tokens
const first = await generateText({ model: chat, messages: [{ role: 'user', content: 'Tell me a story.' }], maxOutputTokens: 16,
                                   temperature: 0, maxRetries: 0 });
const again = await generateText({ model: chat, maxOutputTokens: 8, temperature: 0, maxRetries: 0,
                                   messages: [{ role: 'user', content: 'Tell me a story.' }, { role: 'assistant', content: first.text },
                                              { role: 'user', content: 'More.' }] });
const cached = again.usage.cachedInputTokens ?? again.usage.inputTokenDetails?.cacheReadTokens;
check('cached input tokens', cached > 0, show(again.usage));

// generateObject with a zod schema: with structured outputs the SDK sends it as response_format
// json_schema and validates what comes back against it
const structured = createOpenAICompatible({ name: 'specdec', baseURL, apiKey, supportsStructuredOutputs: true });
const person = z.object({ name: z.string().max(10), age: z.number().int().min(1).max(99) });
try {
  const o = await generateObject({ model: structured.chatModel('stories260K'), schema: person, schemaName: 'person',
                                   prompt: 'Who is she?', maxOutputTokens: 100, temperature: 0, maxRetries: 0 });
  check('generateObject (zod)', person.safeParse(o.object).success && o.finishReason === 'stop',
        show({ object: o.object, finishReason: o.finishReason }));
} catch (e) {
  check('generateObject (zod)', false, `${e.constructor.name} ${e.message} ${e.text ?? ''}`);
}

// a tool the model must call: the SDK sends tools and tool_choice "required" (one call: the provider
// options pass parallel_tool_calls false), reads the call and checks its input against the zod schema
// (stories260K writes ChatML's Hermes-style calls, constrained)
const weatherInput = z.object({ city: z.string().max(12), days: z.number().int().min(1).max(7) });
const tools = { get_weather: tool({ description: 'The weather in a city', inputSchema: weatherInput }) };
try {
  const one = { specdec: { parallel_tool_calls: false } };
  const t = await generateText({ model: chat, prompt: 'What is the weather in Paris?', tools, toolChoice: 'required',
                                 providerOptions: one, maxOutputTokens: 300, temperature: 0, maxRetries: 0 });
  const call = t.toolCalls[0];
  check('generateText with a tool, toolChoice required', t.finishReason === 'tool-calls' && t.toolCalls.length === 1 &&
        call.toolName === 'get_weather' && !call.invalid && weatherInput.safeParse(call.input).success,
        show({ finishReason: t.finishReason, toolCalls: t.toolCalls, text: t.text }));
  const st = streamText({ model: chat, prompt: 'What is the weather in Paris?', tools, toolChoice: 'required',
                          providerOptions: one, maxOutputTokens: 300, temperature: 0, maxRetries: 0,
                          onError: ({ error }) => check('streamText with a tool: error', false, String(error)) });
  const streamedCalls = await st.toolCalls;
  check('streamText with a tool: the same call', (await st.finishReason) === 'tool-calls' &&
        show(streamedCalls.map((c) => c.input)) === show(t.toolCalls.map((c) => c.input)),
        show({ streamed: streamedCalls, generated: t.toolCalls }));
} catch (e) {
  check('generateText with a tool, toolChoice required', false, `${e.constructor.name} ${e.message}`);
}

try {
  await generateText({ model: chat, prompt: 'Hi', maxOutputTokens: 100000, maxRetries: 0 });
  check('a 400 raises', false, 'accepted');
} catch (e) {
  check('a 400 raises', APICallError.isInstance(e) && e.statusCode === 400 && /context of 2048 tokens/.test(e.message),
        `${e.constructor.name} ${e.statusCode} ${e.message}`);
}
process.exit(failed ? 1 : 0);
