// Drives the fake with @deno/sandbox through what the provider relies on
// beyond sdk_check.mjs: connect by id, signals, a missing program, single
// attach, the 30-minute limit, session mode, the limit of 5 sandboxes,
// pagination, and the shapes of errors. It prints one JSON object (marked
// RESULT) of what it saw; the Go test checks it.
const { Client, Sandbox } = await import(process.env.SDK_MODULE);

const out = {};
const client = new Client();
const slug = "edge-" + process.env.RUN_ID;

// What an error looks like to a caller of the SDK.
function shape(e) {
  return { name: e?.name ?? null, ctor: e?.constructor?.name ?? null, status: e?.status ?? null, code: e?.code ?? null };
}
// Deno detaches a killed sandbox's volumes a moment after the kill and
// answers 409 until then.
async function whenDetached(f) {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (e) {
      if (e?.status !== 409 || i >= 100) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
async function failure(f) {
  try {
    await f();
    return null;
  } catch (e) {
    return shape(e);
  }
}

// Error shapes: a wrong token on either plane, a slug taken.
const wrong = new Client({ token: "ddo_wrong_token" });
out.badTokenConsole = await failure(() => wrong.volumes.list());
out.badTokenCreate = await failure(() => Sandbox.create({ token: "ddo_wrong_token" }));
await client.volumes.create({ slug: slug + "-a", region: "ord", capacity: "300MB" });
out.slugTaken = await failure(() => client.volumes.create({ slug: slug + "-a", region: "ord", capacity: "300MB" }));
out.badSlug = await failure(() => client.volumes.create({ slug: "Bad--Slug", region: "ord", capacity: "300MB" }));
out.tooSmall = await failure(() => client.volumes.create({ slug: slug + "-small", region: "ord", capacity: "100MB" }));

// Pagination: three volumes read two at a time.
await client.volumes.create({ slug: slug + "-b", region: "ord", capacity: "300MB" });
await client.volumes.create({ slug: slug + "-c", region: "ord", capacity: "300MiB" });
const first = await client.volumes.list({ limit: 2, search: slug });
out.firstPage = first.items.length;
out.hasMore = first.hasMore;
const all = [];
for await (const v of await client.volumes.list({ limit: 2, search: slug })) all.push(v.slug);
out.paged = all;

// The 30-minute limit on a create.
out.tooLong = await failure(() => Sandbox.create({ timeout: "31m" }));

// Single attach, and no snapshot of an attached volume.
const a = await Sandbox.create({ timeout: "5m", volumes: { "/data": slug + "-a" } });
out.secondAttach = await failure(() => Sandbox.create({ timeout: "5m", volumes: { "/data": slug + "-a" } }));
out.snapshotAttached = await failure(() => client.volumes.snapshot(slug + "-a", { slug: slug + "-s" }));
out.deleteAttached = await failure(() => client.volumes.delete(slug + "-a"));
await a.fs.writeTextFile("/data/from-a.txt", "written before the reconnect");

// Signals: a kill from the client, and a shell killing itself.
const sleeper = await a.spawn("sleep", { args: ["30"], stdout: "piped", stderr: "piped" });
await sleeper.kill();
const st = await sleeper.status;
out.killed = { code: st.code, signal: st.signal, success: st.success };
const selfKill = await a.spawn("sh", { args: ["-c", "kill -TERM $$; exit 9"], stdout: "null", stderr: "null" });
const st2 = await selfKill.status;
out.selfKilled = { code: st2.code, signal: st2.signal };
// A kill of a process that has ended is no error to the SDK.
out.killAfterExit = await failure(() => selfKill.kill());
out.missingProgram = await failure(() => a.spawn("no-such-program-here", { stdout: "piped", stderr: "piped" }));

// Connect by id from another client: the same sandbox; its close does not
// stop the sandbox (it is not the primary connection).
const id = a.id;
{
  const b = await Sandbox.connect({ id });
  out.connectedId = b.id;
  out.readOverConnect = await b.fs.readTextFile("/data/from-a.txt");
  await b.close();
}
await a.close(); // a duration sandbox outlives its creator's socket too
{
  const listed = await client.sandboxes.list();
  out.afterCloses = listed.find((s) => s.id === id)?.status ?? null;
  const c = await Sandbox.connect({ id });
  out.reconnected = (await c.sh`cat /data/from-a.txt`.text()).trim();
  await c.kill();
}
out.connectAfterKill = await failure(() => Sandbox.connect({ id }));
{
  const listed = await client.sandboxes.list();
  out.afterKill = listed.find((s) => s.id === id)?.status ?? null;
}
out.snapshotRightAfterKill = await failure(() => client.volumes.snapshot(slug + "-a", { slug: slug + "-s" }));
out.detachedSnapshot = (await whenDetached(() => client.volumes.snapshot(slug + "-a", { slug: slug + "-s" }))).slug;

// Session mode: the sandbox dies with its primary connection.
{
  const s = await Sandbox.create();
  const sid = s.id;
  await s.close();
  let status = null;
  for (let i = 0; i < 50; i++) {
    status = (await client.sandboxes.list()).find((x) => x.id === sid)?.status ?? null;
    if (status === "stopped") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  out.sessionAfterClose = status;
}

// At most 5 sandboxes at once.
{
  const five = [];
  for (let i = 0; i < 5; i++) five.push(await Sandbox.create({ timeout: "2m" }));
  out.sixth = await failure(() => Sandbox.create({ timeout: "2m" }));
  for (const s of five) await s.kill();
}

await client.snapshots.delete(slug + "-s");
for (const v of ["-a", "-b", "-c"]) await client.volumes.delete(slug + v);
console.log("RESULT " + JSON.stringify(out));
process.exit(0);
