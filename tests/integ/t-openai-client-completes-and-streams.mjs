// t-openai-client-completes-and-streams.mjs: the official OpenAI Node client (npm `openai`),
// unmodified, against a running dsv4d: models.list and models.retrieve, completions.create
// whole and streamed, chat.completions.create whole and streamed with
// stream_options.include_usage, the client's own stream helper (which reassembles and checks
// the chunks, for one choice and for n of them), n choices with logprobs and top_logprobs,
// echo with the prompt's logprobs (lm-evaluation-harness's call, and max_tokens 0), a
// client-side abort mid-stream, and the errors it raises for a 400, a 401 and a 404. Prints
// TAP.
// Run by t-openai-client-completes-and-streams.sh, which installs the package next to a
// copy of this file and passes DSV4D_URL and DSV4D_API_KEY.
import OpenAI from 'openai';

const base = process.env.DSV4D_URL;
const apiKey = process.env.DSV4D_API_KEY;
const PLAN = 34;
let n = 0;
let failed = 0;

function ok(cond, desc, detail) {
    n++;
    console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${desc}`);
    if (!cond) {
        failed++;
        if (detail !== undefined)
            for (const line of JSON.stringify(detail, null, 1).split('\n').slice(0, 20))
                console.log(`#   ${line}`);
    }
}

function is(got, want, desc) {
    const g = JSON.stringify(got), w = JSON.stringify(want);
    ok(g === w, desc, { got, want });
}

/* Unlabelled Prometheus samples by name. */
async function metrics() {
    const text = await (await fetch(`${base}/metrics`)).text();
    const out = {};
    for (const line of text.split('\n')) {
        const m = /^([a-zA-Z0-9_:]+) ([-0-9.e+]+)$/.exec(line);
        if (m)
            out[m[1]] = Number(m[2]);
    }
    return out;
}

/* Until no request runs or waits and no page is held outside the prefix cache (bounded). */
async function waitIdle() {
    let m = {};
    for (let i = 0; i < 600; i++) {
        m = await metrics();
        if (m.dsv4d_requests_running === 0 && m.dsv4d_requests_waiting === 0 &&
            m.dsv4d_kv_pages_used - m.dsv4d_prefix_cache_pages === 0)
            break;
        await new Promise((r) => setTimeout(r, 100));
    }
    return m;
}

async function main() {
    console.log(`1..${PLAN}`);
    console.log(`# against ${base}`);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120000 });

    // --- models
    const models = [];
    for await (const m of client.models.list())
        models.push(m);
    ok(models.length === 1 && models[0].id === 'model' && models[0].object === 'model',
       'models.list: the one model, by its folder name', models);
    const model = models[0].id;
    const one = await client.models.retrieve(model);
    ok(one.id === model && one.object === 'model', 'models.retrieve: the model', one);
    try {
        await client.models.retrieve('no-such-model');
        ok(false, 'models.retrieve of another id throws');
    } catch (e) {
        ok(e instanceof OpenAI.NotFoundError && e.status === 404,
           'models.retrieve of another id: the client throws NotFoundError (404)',
           { name: e.name, status: e.status });
    }

    // --- completions (ignore_eos is dsv4d's; the client passes extra body keys through)
    const creq = { model, prompt: 'Hello', max_tokens: 8, temperature: 0, ignore_eos: true };
    const c = await client.completions.create(creq);
    ok(c.object === 'text_completion' && c.id.startsWith('cmpl-') && c.model === model,
       'completions.create: a text_completion', c);
    ok(c.choices.length === 1 && typeof c.choices[0].text === 'string' &&
       c.choices[0].finish_reason === 'length', 'completions.create: one choice, finish_reason length', c);
    is(c.usage, { prompt_tokens: 6, completion_tokens: 8, total_tokens: 14 },
       'completions.create: usage');

    const cs = await client.completions.create({ ...creq, stream: true });
    const cchunks = [];
    for await (const k of cs)
        cchunks.push(k);
    ok(cchunks.length >= 2 && cchunks.every((k) => k.object === 'text_completion'),
       'completions stream: the client yields text_completion chunks', cchunks.length);
    is(cchunks.map((k) => k.choices[0].text).join(''), c.choices[0].text,
       'completions stream: the chunks add up to the whole completion');
    is(cchunks.at(-1).choices[0].finish_reason, 'length',
       'completions stream: the last chunk has finish_reason length');

    const csu = await client.completions.create({ ...creq, stream: true,
                                                  stream_options: { include_usage: true } });
    let cusage = null;
    for await (const k of csu)
        if (k.usage)
            cusage = k.usage;
    is(cusage, c.usage, 'completions stream with include_usage: the usage chunk matches');

    // --- chat
    const chreq = { model, messages: [{ role: 'system', content: 'Be brief.' },
                                      { role: 'user', content: 'Hi there' }],
                    max_tokens: 10, temperature: 0, ignore_eos: true };
    const cc = await client.chat.completions.create(chreq);
    ok(cc.object === 'chat.completion' && cc.id.startsWith('chatcmpl-') && cc.model === model,
       'chat.completions.create: a chat.completion', cc);
    const msg = cc.choices[0].message;
    ok(msg.role === 'assistant' && typeof msg.content === 'string' &&
       cc.choices[0].finish_reason === 'length', 'chat.completions.create: an assistant message', cc);
    ok(cc.usage.completion_tokens === 10 &&
       cc.usage.total_tokens === cc.usage.prompt_tokens + 10, 'chat.completions.create: usage', cc.usage);

    const ss = await client.chat.completions.create({ ...chreq, stream: true,
                                                      stream_options: { include_usage: true } });
    const schunks = [];
    for await (const k of ss)
        schunks.push(k);
    const withChoices = schunks.filter((k) => k.choices.length > 0);
    ok(schunks.every((k) => k.object === 'chat.completion.chunk' && k.id === schunks[0].id),
       'chat stream: chat.completion.chunk with one id');
    is(withChoices[0].choices[0].delta.role, 'assistant', 'chat stream: the first delta names the role');
    is(withChoices.map((k) => k.choices[0].delta.content ?? '').join(''), msg.content,
       'chat stream: the deltas add up to the whole message');
    is(withChoices.at(-1).choices[0].finish_reason, 'length', 'chat stream: finish_reason length last');
    const last = schunks.at(-1);
    ok(last.choices.length === 0 && JSON.stringify(last.usage) === JSON.stringify(cc.usage),
       'chat stream with include_usage: a last chunk with no choices and the usage', last);
    ok(withChoices.every((k) => k.usage === null || k.usage === undefined),
       'chat stream with include_usage: other chunks carry no usage');

    // the client's stream helper accumulates the deltas into a whole chat.completion
    const runner = client.chat.completions.stream({ ...chreq, stream_options: { include_usage: true } });
    let deltas = '';
    runner.on('content', (delta) => { deltas += delta; });
    const fin = await runner.finalChatCompletion();
    is(fin.choices[0].message.content, msg.content,
       'chat.completions.stream: finalChatCompletion gives the whole message');
    is(deltas, msg.content, 'chat.completions.stream: its content events add up to it');
    is(fin.usage, cc.usage, 'chat.completions.stream: with the usage');

    // --- n choices with logprobs: each choice its own, the stream helper reassembles them all
    const nreq = { ...chreq, temperature: 1, seed: 3, n: 2, logprobs: true, top_logprobs: 3 };
    const nc = await client.chat.completions.create(nreq);
    ok(nc.choices.length === 2 && nc.choices.every((ch, i) => ch.index === i &&
       ch.logprobs.content.length === 10 &&
       ch.logprobs.content.every((e) => e.top_logprobs.length === 3 && Array.isArray(e.bytes))),
       'chat n 2 with top_logprobs 3: two choices, ten logprob entries each with three ' +
       'alternatives and bytes', nc.choices.map((ch) => ch.logprobs.content[0]));
    is(nc.usage.completion_tokens, 20, 'chat n 2: usage counts both choices');
    const nrun = client.chat.completions.stream(nreq);
    const nfin = await nrun.finalChatCompletion();
    is(nfin.choices.map((ch) => ch.message.content), nc.choices.map((ch) => ch.message.content),
       'chat.completions.stream with n 2: finalChatCompletion gives both whole messages');
    const lc = await client.completions.create({ ...creq, logprobs: 2 });
    const lp = lc.choices[0].logprobs;
    ok(lp.tokens.length === 8 && lp.token_logprobs.length === 8 && lp.top_logprobs.length === 8 &&
       lp.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2),
       'completions logprobs 2: a token, a logprob and up to two alternatives per position', lp);
    // echo: the prompt's text and tokens first (BOS and 5 bytes), its first logprob null
    const ec = await client.completions.create({ ...creq, echo: true, logprobs: 1, max_tokens: 1 });
    const el = ec.choices[0].logprobs;
    ok(ec.choices[0].text.startsWith('Hello') && el.tokens.length === 7 &&
       el.token_logprobs[0] === null && el.top_logprobs[0] === null &&
       el.token_logprobs.slice(1).every((v) => v <= 0),
       'completions echo with logprobs 1: the prompt\'s six tokens scored (the first null), then ' +
       'the generated one', el);
    const e0 = await client.completions.create({ ...creq, echo: true, logprobs: 1, max_tokens: 0 });
    ok(e0.choices[0].text === 'Hello' && e0.usage.completion_tokens === 0 &&
       JSON.stringify(e0.choices[0].logprobs.token_logprobs) ===
           JSON.stringify(el.token_logprobs.slice(0, 6)),
       'echo with max_tokens 0: the prompt alone, scored as with a generated token after it', e0);

    // --- a client that aborts mid-stream: the request ends and its pages are freed
    const ac = new AbortController();
    const long = await client.completions.create({ ...creq, max_tokens: 3000, stream: true },
                                                 { signal: ac.signal });
    /* the client ends the iteration quietly on its own abort (or raises its abort error) */
    let got = 0, finished = false, raised = null;
    try {
        for await (const k of long) {
            got += k.choices.length;
            finished ||= k.choices.some((ch) => ch.finish_reason !== null);
            if (got === 3)
                ac.abort();
        }
    } catch (e) {
        raised = e;
    }
    ok(got >= 3 && !finished && (raised === null || raised instanceof OpenAI.APIUserAbortError),
       'a stream the client aborts ends early, without a finish_reason or another error',
       { got, finished, raised: String(raised) });
    const m = await waitIdle();
    ok(m.dsv4d_requests_running === 0 && m.dsv4d_kv_pages_used - m.dsv4d_prefix_cache_pages === 0,
       'after the abort no request runs and no page is held outside the prefix cache', m);
    ok(m.dsv4d_requests_aborted_total >= 1, 'dsv4d counted the aborted request', m);

    // --- errors the client turns into its exception classes
    try {
        await client.completions.create({ ...creq, max_tokens: -1 });
        ok(false, 'max_tokens -1 throws');
        ok(false, 'the error names the parameter');
    } catch (e) {
        ok(e instanceof OpenAI.BadRequestError && e instanceof OpenAI.APIError && e.status === 400,
           'max_tokens -1: the client throws BadRequestError (APIError, status 400)',
           { name: e.name, status: e.status, message: e.message });
        ok(e.param === 'max_tokens' && typeof e.message === 'string' && e.type !== undefined,
           'the error names the parameter (param, type, message from the body)',
           { param: e.param, type: e.type, code: e.code, message: e.message });
    }
    const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: `${apiKey}-wrong`, maxRetries: 0 });
    try {
        await bad.models.list();
        ok(false, 'a wrong API key throws');
    } catch (e) {
        ok(e instanceof OpenAI.AuthenticationError && e.status === 401,
           'a wrong API key: the client throws AuthenticationError (401)', { name: e.name, status: e.status });
    }
    if (n !== PLAN)
        console.log(`# ran ${n} of ${PLAN}`);
    return failed === 0 && n === PLAN;
}

main().then((good) => process.exit(good ? 0 : 1), (e) => {
    console.log(`not ok ${n + 1} - unexpected exception`);
    for (const line of String(e?.stack ?? e).split('\n'))
        console.log(`#   ${line}`);
    process.exit(1);
});
