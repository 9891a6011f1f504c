// Drives the fake with Deno's official SDK, @deno/sandbox: every step is
// something the SDK does against the real service. It prints one JSON object
// of what it saw; the Go test checks it. SDK_MODULE is the SDK's entry file,
// SECRET_URL a plain-HTTP URL on a host the secret is scoped to.
const { Client, Sandbox } = await import(process.env.SDK_MODULE);

const out = {};

// Deno detaches a killed sandbox's volumes a moment after the kill and
// answers 409 until then: what is done with them next waits, as a real
// client of Deno must.
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
const client = new Client();
const slug = "sdk-" + process.env.RUN_ID;

const vol = await client.volumes.create({ slug: slug + "-ws", region: "ord", capacity: "1GB" });
out.volume = { id: vol.id, slug: vol.slug, capacity: vol.capacity, bootable: vol.isBootable };
out.volumeGot = (await client.volumes.get(slug + "-ws"))?.slug ?? null;
out.volumeMissing = await client.volumes.get(slug + "-nope");

const root = await client.volumes.create({ slug: slug + "-root", region: "ord", capacity: "2GB", from: "builtin:debian-13" });
out.rootBootable = root.isBootable;

{
  const sb = await Sandbox.create({
    root: slug + "-root",
    volumes: { "/data": slug + "-ws" },
    timeout: "5m",
    labels: { run: process.env.RUN_ID },
    env: { GREETING: "hello" },
    secrets: { API_KEY: { hosts: [process.env.SECRET_HOST], value: process.env.SECRET_VALUE } },
  });
  out.id = sb.id;

  // spawn with streamed output
  const child = await sb.spawn("sh", {
    args: ["-c", "echo $GREETING; echo to-err >&2; echo key=$API_KEY; curl -s -H \"Authorization: Bearer $API_KEY\" \"$SECRET_URL\"; echo; exit 3"],
    env: { SECRET_URL: process.env.SECRET_URL },
    stdout: "piped",
    stderr: "piped",
  });
  const chunks = [];
  for await (const c of child.stdout) chunks.push(Buffer.from(c));
  const errText = await new Response(child.stderr).text();
  const status = await child.status;
  out.spawn = { stdout: Buffer.concat(chunks).toString(), stderr: errText, code: status.code, success: status.success };

  // sh, the tagged template
  const r = await sb.sh`echo from-sh > /data/note.txt && cat /data/note.txt`.text();
  out.sh = r;

  // files
  await sb.fs.writeTextFile("/data/hello.txt", "written by the SDK");
  out.readBack = await sb.fs.readTextFile("/data/hello.txt");
  await sb.fs.writeFile("/home/app/bin.dat", new Uint8Array([0, 1, 2, 255]));
  out.binary = Array.from(await sb.fs.readFile("/home/app/bin.dat"));
  const names = [];
  for await (const e of sb.fs.readDir("/data")) names.push(e.name);
  out.dir = names.sort();
  try { await sb.fs.readTextFile("/data/missing"); out.missing = "no error"; } catch (e) { out.missing = e.constructor?.name ?? String(e); }
  out.stat = (await sb.fs.stat("/data/hello.txt")).size;
  out.env = await sb.env.get("API_KEY");

  // deno
  const p = await sb.deno.run({ code: "const n: number = 40; console.log(n + 2)", extension: "ts", stdout: "piped", stderr: "piped" });
  out.deno = (await p.output()).stdoutText ?? null;

  // exposeHttp
  out.url = await sb.exposeHttp({ port: 8000 });

  // extend
  out.extended = (await sb.extendTimeout("1m")) instanceof Date;

  // listing
  const listed = await client.sandboxes.list({ labels: { run: process.env.RUN_ID } });
  out.listed = listed.map((s) => s.status);

  await sb.kill();
}

// snapshot of the detached root volume, then boot from it
const snap = await whenDetached(() => client.volumes.snapshot(slug + "-root", { slug: slug + "-snap" }));
out.snapshot = { slug: snap.slug, bootable: snap.isBootable };
out.snapshotGot = (await client.snapshots.get(slug + "-snap"))?.slug ?? null;
const snaps = [];
for await (const s of await client.snapshots.list()) snaps.push(s.slug);
out.snapshots = snaps;

{
  const sb2 = await Sandbox.create({ root: slug + "-snap" });
  out.fromSnapshot = (await sb2.sh`ls /home/app`.text()).trim();
  await sb2.kill();
}

try {
  await client.volumes.delete(slug + "-root");
  out.deleteWithSnapshot = "deleted";
} catch (e) {
  out.deleteWithSnapshot = e.status ?? String(e);
}
await client.snapshots.delete(slug + "-snap");
await client.volumes.delete(slug + "-root");
await whenDetached(() => client.volumes.delete(slug + "-ws"));
out.afterDelete = await client.volumes.get(slug + "-ws");

// Output inherited from sandboxes goes to stdout too: the result is the
// line marked as such.
console.log("RESULT " + JSON.stringify(out));
process.exit(0);
