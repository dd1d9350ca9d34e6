// llama.cpp's prompt and decode speed on one GGUF file, measured the way
// `strata bench` measures Strata's, so the two can be set side by side:
//   ppN: N seeded random tokens evaluated from an empty context in one batch;
//   tgN: N tokens decoded one at a time from an empty context.
// One warm-up of each, then REPS timed runs; prints one JSON object per test
// (the same fields as `strata bench --json`).
//
//   node bench.mjs MODEL.gguf [-p 512] [-n 128] [-t THREADS] [-r REPS]
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = {p: 512, n: 128, t: 2, r: 5};
let modelPath = null;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "-p" || a === "-n" || a === "-t" || a === "-r") opt[a[1]] = Number(args[++i]);
    else if (modelPath === null) modelPath = a;
    else throw new Error(`unknown argument ${a}`);
}
if (modelPath === null) {
    console.error("usage: node bench.mjs MODEL.gguf [-p 512] [-n 128] [-t THREADS] [-r REPS]");
    process.exit(2);
}

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});
const nMax = Math.max(opt.p, opt.n, 32);
const context = await model.createContext({
    contextSize: Math.max(nMax, 256), batchSize: Math.max(opt.p, 32), threads: opt.t,
    flashAttention: false,
});
const sequence = context.getSequence();

// Seeded random ids over the vocabulary (the rows of token_embd.weight).
const tensorInfo = model.fileInfo.fullTensorInfo ?? model.fileInfo.tensorInfo ?? [];
const embd = tensorInfo.find((t) => t.name === "token_embd.weight");
const vocab = embd ? Number(embd.dimensions[1]) : 256;
let state = 1234n;
const tokens = [];
for (let i = 0; i < nMax; i++) {
    state = (state * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    tokens.push(Number((state >> 33n) % BigInt(vocab)));
}

async function runPP(n) {
    await sequence.clearHistory();
    const t0 = process.hrtime.bigint();
    await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(0, n));
    return Number(process.hrtime.bigint() - t0) / 1e9;
}

async function runTG(n) {
    await sequence.clearHistory();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await sequence.evaluateWithoutGeneratingNewTokens([tokens[i]]);
    return Number(process.hrtime.bigint() - t0) / 1e9;
}

function meanSd(v) {
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const q = v.reduce((a, b) => a + (b - mean) * (b - mean), 0);
    return [mean, v.length > 1 ? Math.sqrt(q / (v.length - 1)) : 0];
}

for (const [name, n, run] of [["pp", opt.p, runPP], ["tg", opt.n, runTG]]) {
    if (n === 0) continue;
    await run(Math.min(n, name === "pp" ? 32 : 4)); // warm-up
    const tps = [];
    for (let k = 0; k < opt.r; k++) tps.push(n / await run(n));
    const [mean, sd] = meanSd(tps);
    console.log(JSON.stringify({
        model: modelPath, engine: "llama.cpp", threads: opt.t, test: `${name}${n}`, n_tokens: n,
        reps: opt.r, tokens_per_second: Number(mean.toFixed(3)), stddev: Number(sd.toFixed(3)),
    }));
}
await context.dispose();
await model.dispose();
