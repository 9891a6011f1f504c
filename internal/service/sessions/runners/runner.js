// The JavaScript and TypeScript runner: deno eval, or for JavaScript
// node --expose-internals -e, runs it with the user's code on standard
// input. It evaluates
// the code in the global scope, like a REPL, so that the value of the last
// expression is the result, and after the code's own output writes one
// line: "\n" + SANDSTEP_MARK + {"ok","error","truncated","result"}.
//
// With SANDSTEP_KERNEL set it is a session's stateful interpreter
// (sandstep-kernel): it runs one piece of code after another in the same
// global scope, as stateful.go describes.
(async () => {
  const env = process.env;
  let mark = env.SANDSTEP_MARK || "";
  const lang = env.SANDSTEP_LANG || "javascript";
  const maxResult = Number(env.SANDSTEP_MAX_RESULT) || 65536;
  const kernel = env.SANDSTEP_KERNEL || "";
  delete env.SANDSTEP_KERNEL;
  delete env.SANDSTEP_MARK;
  delete env.SANDSTEP_LANG;
  delete env.SANDSTEP_MAX_RESULT;
  const isDeno = typeof Deno !== "undefined";
  const fs = await import("node:fs");
  const path = await import("node:path");
  const url = await import("node:url");
  const util = await import("node:util");
  const vm = await import("node:vm");
  const nodeModule = await import("node:module");

  // require() resolves from the working directory (the session's volume)
  // and NODE_PATH (the snapshot's packages); import() of a bare name goes
  // through the same resolution, which ESM alone would not do.
  const req = withNodePath(nodeModule.createRequire(path.join(process.cwd(), "[run]")));
  globalThis.require = req;
  const importer = async (spec) => {
    if (!nodeModule.isBuiltin(spec) && !/^[a-z]+:/.test(spec)) {
      try {
        return await import(url.pathToFileURL(req.resolve(spec)).href);
      } catch {}
    }
    return import(spec);
  };

  // withNodePath makes base look in NODE_PATH after the working directory,
  // as Node.js's require does and Deno's does not.
  function withNodePath(base) {
    const dirs = (env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
    if (!isDeno || dirs.length === 0) return base;
    const more = dirs.map((d) => nodeModule.createRequire(path.join(d, "[run]")));
    const resolve = (spec, options) => {
      for (const r of [base, ...more]) {
        try {
          return r.resolve(spec, options);
        } catch (e) {
          if (e.code !== "MODULE_NOT_FOUND") throw e;
        }
      }
      return base.resolve(spec, options); // throws the working directory's error
    };
    const require = (spec) => (nodeModule.isBuiltin(spec) ? base(spec) : base(resolve(spec)));
    return Object.assign(require, { resolve, cache: base.cache, main: base.main });
  }

  let failure = null;
  const fail = (e) => {
    if (failure === null) failure = describe(e);
  };
  process.on("uncaughtException", fail);
  process.on("unhandledRejection", fail);

  function describe(e) {
    if (!(e instanceof Error)) return "Uncaught " + util.inspect(e);
    const lines = String(e.stack || e).split("\n");
    const head = [];
    for (const l of lines) {
      if (/^\s+at /.test(l)) break;
      head.push(l);
    }
    // The code's own frames: main.js on Node.js; on Deno, V8's REPL mode
    // leaves the code unnamed ("<anonymous>:2:1"), so it is named here.
    const own = lines
      .filter((l) => /^\s+at /.test(l) && /\bmain\.(js|ts)\b|[( ]<anonymous>:\d/.test(l))
      .map((l) => l.replace(/([( ])<anonymous>:(\d)/, "$1main." + (lang === "typescript" ? "ts" : "js") + ":$2"));
    return head.concat(own).join("\n");
  }

  async function runScript(src) {
    let wrapped = null;
    try {
      // The REPL's own rewrite: top-level await, and declarations kept
      // global, with the last expression's value returned as {value}.
      wrapped = req("internal/repl/await").processTopLevelAwait(src);
    } catch {}
    const opts = { filename: "main.js", importModuleDynamically: importer };
    if (wrapped !== null) {
      const r = await new vm.Script(wrapped, opts).runInThisContext({ displayErrors: true });
      return r ? r.value : undefined;
    }
    if (isDeno) return await replEvaluate(src);
    let script;
    try {
      script = new vm.Script(src, opts);
    } catch (e) {
      if (!(e instanceof SyntaxError) || !/await/.test(e.message)) throw e;
      // Without the REPL's rewrite, top-level await runs in an async
      // function: `return` gives the result.
      script = new vm.Script("(async () => {\n" + src + "\n})()", opts);
    }
    return await script.runInThisContext({ displayErrors: true });
  }

  // replEvaluate runs src as V8's own REPL mode does (Deno has no
  // internal/repl/await): top-level await, and the last expression's value
  // as the result. V8 hands back a handle; the value itself, or what was
  // thrown, is fetched through a global so that it keeps its type.
  async function replEvaluate(src) {
    const inspector = await import("node:inspector");
    const session = new inspector.Session();
    session.connect();
    const post = (method, params) =>
      new Promise((resolve, reject) =>
        session.post(method, params, (err, res) => (err ? reject(err) : resolve(res))),
      );
    const slot = "__sandstep_value";
    const take = async (remote) => {
      const arg = remote.objectId !== undefined
        ? { objectId: remote.objectId }
        : remote.unserializableValue !== undefined
        ? { unserializableValue: remote.unserializableValue }
        : remote.type === "undefined" ? {} : { value: remote.value };
      const global = await post("Runtime.evaluate", { expression: "globalThis" });
      await post("Runtime.callFunctionOn", {
        objectId: global.result.objectId,
        functionDeclaration: "function (v) { this." + slot + " = v; }",
        arguments: [arg],
      });
      const v = globalThis[slot];
      delete globalThis[slot];
      return v;
    };
    try {
      const res = await post("Runtime.evaluate", { expression: src, replMode: true, awaitPromise: true });
      if (res.exceptionDetails) {
        const d = res.exceptionDetails;
        throw d.exception ? await take(d.exception) : new Error(d.text);
      }
      return await take(res.result);
    } finally {
      session.disconnect();
    }
  }

  function encode(v) {
    if (v === undefined || typeof v === "function" || typeof v === "symbol") return null;
    let s;
    try {
      s = JSON.stringify(v, (_, x) => (typeof x === "bigint" ? x.toString() : x));
    } catch {
      s = JSON.stringify(util.inspect(v, { depth: 4 }));
    }
    return s === undefined ? null : s;
  }

  // execute runs code, writes the verdict line with write and returns
  // the exit status.
  async function execute(code, write, extra) {
    failure = null;
    let value;
    try {
      if (lang === "typescript") {
        if (typeof nodeModule.stripTypeScriptTypes !== "function") {
          throw new Error("typescript runs on Deno 2, which this sandbox lacks. Send the code as javascript instead.");
        }
        // Types erased (in place, so that errors point at the right line),
        // or, for enums and namespaces, turned into JavaScript; then run
        // like JavaScript: the last expression is the result.
        let js;
        try {
          js = nodeModule.stripTypeScriptTypes(code);
        } catch (e) {
          if (e.code !== "ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX") throw e;
          js = nodeModule.stripTypeScriptTypes(code, { mode: "transform" });
        }
        value = await runScript(js);
      } else {
        value = await runScript(code);
      }
    } catch (e) {
      fail(e);
    }
    // Let a rejection the code left unhandled surface before the verdict.
    await new Promise((resolve) => setImmediate(resolve));
    const ok = failure === null;
    let result = ok ? encode(value) : null;
    let truncated = false;
    if (result !== null && Buffer.byteLength(result) > maxResult) {
      result = JSON.stringify(result.slice(0, maxResult));
      truncated = true;
    }
    const meta = JSON.stringify({ ok, error: failure, truncated, ...extra });
    await write("\n" + mark + meta.slice(0, -1) + ',"result":' + (result === null ? "null" : result) + "}\n");
    return ok ? 0 : 1;
  }

  if (!kernel) {
    const status = await execute(fs.readFileSync(0, "utf8"), (line) => new Promise((resolve) => process.stdout.write(line, resolve)));
    process.exit(status);
  }

  // The stateful interpreter (see stateful.go): a request comes as one
  // line on the FIFO ctl, "<client pid> <mark> <started 0|1> <why state
  // was lost>". The code is the client's standard input, and what the code
  // writes through process.stdout and process.stderr (console included)
  // goes to the client's standard output and error (its fds 7, 8 and 9);
  // the FIFO status gets "<client pid> <exit status>". status is held
  // open, for reading and writing, for the interpreter's whole life: a
  // client reading it meets its end only when the interpreter is gone, and
  // a line for a client that went away waits in it instead of failing.
  const ctl = fs.openSync(path.join(kernel, "ctl"), "r+");
  const status = fs.openSync(path.join(kernel, "status"), "r+");
  fs.writeFileSync(path.join(kernel, "pid.tmp"), String(process.pid));
  fs.renameSync(path.join(kernel, "pid.tmp"), path.join(kernel, "pid"));
  const readline = await import("node:readline");
  const lines = readline.createInterface({ input: fs.createReadStream(null, { fd: ctl }) });
  const stdoutWrite = process.stdout.write;
  const stderrWrite = process.stderr.write;
  const redirect = (stream, fd) => {
    stream.write = (chunk, encoding, cb) => {
      try {
        fs.writeSync(fd, typeof chunk === "string" ? chunk : Buffer.from(chunk));
      } catch {}
      const done = typeof encoding === "function" ? encoding : cb;
      if (done) done();
      return true;
    };
  };
  for await (const line of lines) {
    const [client, runMark, started, ...lost] = line.split(" ");
    mark = runMark || "";
    let code = 1;
    let out = -1;
    let err = -1;
    try {
      const fd = "/proc/" + client + "/fd/";
      const src = fs.readFileSync(fd + "7", "utf8");
      out = fs.openSync(fd + "8", "w");
      err = fs.openSync(fd + "9", "w");
      redirect(process.stdout, out);
      redirect(process.stderr, err);
      const interpreter = { started: started === "1" };
      if (lost.join(" ")) interpreter.state_lost = lost.join(" ");
      code = await execute(src, async (l) => fs.writeSync(out, l), { interpreter });
    } catch {
      // the client is gone
    } finally {
      process.stdout.write = stdoutWrite;
      process.stderr.write = stderrWrite;
      if (out >= 0) fs.closeSync(out);
      if (err >= 0) fs.closeSync(err);
    }
    fs.writeSync(status, client + " " + code + "\n");
  }
})();
