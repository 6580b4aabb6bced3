// A jouled client written from docs/ alone (protocol.md, ledger.md).
//
//   node client.mjs submit --target unix:PATH --proto FILE --pubkey jouled.pub \
//        --task SUITE/NAME --patch FILE [--out receipt.json]
//   node client.mjs verify --pubkey jouled.pub RECEIPT.json
//
// `submit` calls Submit over the daemon's Unix socket, follows the stream of
// progress events to the receipt, and verifies it; `verify` checks a receipt
// file. Both print one JSON line and exit 0 when the receipt verifies, 1 when
// it does not, 2 on a usage or call error.

import { createHash, createPublicKey, verify as edVerify, randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";

const PAYLOAD_TYPE = "application/vnd.jouled.event.v1+json";

class Rejected extends Error {}

function sha256(...parts) {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest();
}

// ledger.md, The envelope: PAE(type, payload), lengths in bytes.
function pae(type, payload) {
  const t = Buffer.from(type, "utf8");
  return Buffer.concat([
    Buffer.from(`DSSEv1 ${t.length} `, "utf8"),
    t,
    Buffer.from(` ${payload.length} `, "utf8"),
    payload,
  ]);
}

// ledger.md, Merkle leaves and proofs: RFC 9162 section 2.1.3.2.
function rootFromProof(leaf, index, size, path) {
  if (index >= size) return null;
  let fn = BigInt(index);
  let sn = BigInt(size - 1);
  let r = leaf;
  const node = (a, b) => sha256(Buffer.from([1]), a, b);
  for (const p of path) {
    if (sn === 0n) return null;
    if ((fn & 1n) === 1n || fn === sn) {
      r = node(p, r);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      r = node(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n ? r : null;
}

function check(ok, message) {
  if (!ok) throw new Rejected(message);
}

// ledger.md, Receipts: every check, with nothing but the pinned public key.
export function verifyReceipt(receipt, pubkeyPem) {
  const key = createPublicKey(pubkeyPem);
  const rawKey = Buffer.from(key.export({ format: "jwk" }).x, "base64url");
  const keyid = sha256(rawKey).toString("hex");

  const envelope = receipt.entry;
  const type = envelope.payloadType ?? envelope.payload_type;
  check(type === PAYLOAD_TYPE, `payload type ${type} is not ${PAYLOAD_TYPE}`);
  const payload = Buffer.from(envelope.payload, "base64");
  const leaf = sha256(Buffer.from([0]), payload);
  check(leaf.toString("hex") === envelope.leaf_hash, "leaf hash does not match the payload");
  const signature = envelope.signatures.find((s) => s.keyid === keyid);
  check(signature !== undefined, "no signature by the pinned key");
  check(
    edVerify(null, pae(PAYLOAD_TYPE, payload), key, Buffer.from(signature.sig, "base64")),
    "the entry's signature does not verify",
  );

  // ledger.md, Checkpoints: the signed note.
  const note = receipt.checkpoint;
  const split = note.indexOf("\n\n");
  check(split > 0, "the checkpoint is not a signed note");
  const text = note.slice(0, split + 1);
  const [origin, sizeText, rootB64] = text.slice(0, -1).split("\n");
  const keyHash = sha256(Buffer.from(origin + "\n", "utf8"), Buffer.from([1]), rawKey).subarray(0, 4);
  let noteVerified = false;
  for (const line of note.slice(split + 2).split("\n").filter((l) => l)) {
    check(line.startsWith("\u2014 "), "a signature line does not start with an em dash");
    const [name, blob] = line.slice(2).split(" ");
    const bytes = Buffer.from(blob, "base64");
    if (name === origin && bytes.subarray(0, 4).equals(keyHash)) {
      check(
        edVerify(null, Buffer.from(text, "utf8"), key, bytes.subarray(4)),
        "the checkpoint's signature does not verify",
      );
      noteVerified = true;
    }
  }
  check(noteVerified, "the checkpoint has no signature by the pinned key");

  // The proof: the leaf at seq, in the checkpoint's tree.
  const doc = JSON.parse(payload.toString("utf8"));
  const size = Number(sizeText);
  const proof = receipt.proof;
  check(doc.seq === proof.seq && proof.tree_size === size, "the proof is for another entry or tree");
  const root = rootFromProof(leaf, doc.seq, size, proof.hashes.map((h) => Buffer.from(h, "hex")));
  check(root !== null && root.equals(Buffer.from(rootB64, "base64")), "the inclusion proof fails");
  return { seq: doc.seq, kind: doc.kind, body: doc.body, tree_size: size };
}

async function submit(args) {
  const grpc = await import("@grpc/grpc-js");
  const loader = await import("@grpc/proto-loader");
  // protocol.md: field names as the .proto spells them.
  const definition = loader.loadSync(args.proto, { keepCase: true, longs: Number, defaults: true });
  const { Jouled } = grpc.loadPackageDefinition(definition).jouled.v1;
  const client = new Jouled(args.target, grpc.credentials.createInsecure());
  const request = {
    task_id: args.task,
    patch: readFileSync(args.patch),
    solver: args.solver ?? "docs/node",
    idempotency_key: `node-${randomUUID()}`,
  };
  const phases = [];
  const receipt = await new Promise((resolve, reject) => {
    let got = null;
    const call = client.Submit(request, { deadline: Date.now() + 600_000 });
    call.on("data", (event) => {
      if (event.progress) phases.push(event.progress.phase);
      if (event.receipt) got = event.receipt;
    });
    call.on("error", (err) => reject(new Error(`Submit failed: ${err.code} ${err.details}`)));
    call.on("end", () =>
      got ? resolve(got) : reject(new Error("the stream ended without a receipt")),
    );
  });
  client.close();
  const document = JSON.parse(receipt.json);
  check(document.seq === receipt.seq, "the Receipt message and its JSON disagree on seq");
  if (args.out) writeFileSync(args.out, JSON.stringify(document));
  const checked = verifyReceipt(document, readFileSync(args.pubkey, "utf8"));
  check(checked.kind === "result" && checked.body.task_id === args.task, "not this task's result");
  return { ok: true, phases, seq: checked.seq, status: checked.body.status, tree_size: checked.tree_size };
}

function parse(argv) {
  const [command, ...rest] = argv;
  const args = { command, files: [] };
  for (let i = 0; i < rest.length; i++) {
    if (rest[i].startsWith("--")) args[rest[i].slice(2)] = rest[++i];
    else args.files.push(rest[i]);
  }
  return args;
}

async function main() {
  const args = parse(process.argv.slice(2));
  try {
    let result;
    if (args.command === "submit") {
      result = await submit(args);
    } else if (args.command === "verify") {
      const receipt = JSON.parse(readFileSync(args.files[0], "utf8"));
      const checked = verifyReceipt(receipt, readFileSync(args.pubkey, "utf8"));
      result = { ok: true, seq: checked.seq, status: checked.body.status };
    } else {
      throw new Error("usage: client.mjs submit|verify ...");
    }
    console.log(JSON.stringify(result));
  } catch (err) {
    console.log(JSON.stringify({ ok: false, error: err.message }));
    process.exit(err instanceof Rejected ? 1 : 2);
  }
}

await main();
