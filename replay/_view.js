// The renderer of `python -m replay view` (replay/_view.py inlines this file).
//
// Safety rule: data from the log is only ever put into the page as text
// (Node.append of a string, textContent, an attribute value, a dataset entry),
// never parsed as markup: this file uses no innerHTML, outerHTML,
// insertAdjacentHTML, document.write or eval. The page's Content-Security-Policy
// allows this script and the style sheet (by hash) and nothing else.
"use strict";
(() => {
  // ------------------------------------------------------------------ data

  // A number whose JSON text JavaScript would print differently (1.0, 1e-07, an
  // integer past 2**53): shown as the log has it, computed with as `value`.
  class Num {
    constructor(value, source) {
      this.value = value;
      this.source = source;
    }
  }
  const num = (x) => (x instanceof Num ? x.value : x);

  const reviver = (key, value, context) => {
    if (
      typeof value === "number" &&
      context &&
      typeof context.source === "string" &&
      String(value) !== context.source
    ) {
      return new Num(value, context.source);
    }
    return value;
  };

  // The reviver costs time on every value, so it runs only where the data may hold
  // a number JavaScript prints differently (replay/_view.py looks: data-numbers).
  const dataNode = document.getElementById("agentloop-data");
  const DATA = JSON.parse(
    dataNode.textContent,
    dataNode.dataset.numbers === "exact" ? reviver : undefined,
  );
  const META = DATA.meta;
  const EVENTS = DATA.events;
  const BLOBS = DATA.blobs || {};
  const REPORT = DATA.report;
  // A session tree (DESIGN §26): each child session's events follow its parent's,
  // depth first; SESSIONS says where each one is and which tool.call ran it.
  const SESSIONS = DATA.sessions || [{ source: META.source, parent: null, call: null, start: 0, end: EVENTS.length }];
  const ROOT_END = SESSIONS[0].end;
  const sessionOf = new Int32Array(EVENTS.length);
  const childAt = new Map(); // index of a tool.call -> the session it ran
  SESSIONS.forEach((s, k) => {
    sessionOf.fill(k, s.start, s.end);
    if (k > 0) childAt.set(s.call, k);
  });
  const OUTCOME_TYPES = new Set(["session.complete", "run.finished"]);
  const COMMON_FIELDS = new Set(["type", "sequence", "at", "step"]);
  const EXPAND_BY_DEFAULT = 2000; // events; larger logs open collapsed

  // ------------------------------------------------------------------ DOM helpers

  // Characters that are invisible or reorder the text around them (bidirectional
  // controls, zero-width characters, the soft hyphen): a model could use them to make
  // "invoice\u202Efdp.exe" look like "invoiceexe.pdf". They are shown as a marked
  // <U+XXXX> token instead of being put in the page.
  const INVISIBLE =
    /[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\u3164\uFEFF\uFFA0]/;
  const INVISIBLE_ALL = new RegExp(INVISIBLE.source, "g");
  const codeName = (ch) => "U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");

  // The text of a string as it is shown: each invisible character as <U+XXXX>.
  const visibleText = (text) => text.replace(INVISIBLE_ALL, (ch) => `<${codeName(ch)}>`);

  // A string as nodes: the text, with each invisible character as a marked token.
  function visible(text) {
    if (!INVISIBLE.test(text)) return text;
    const fragment = document.createDocumentFragment();
    let last = 0;
    for (const match of text.matchAll(INVISIBLE_ALL)) {
      if (match.index > last) fragment.append(text.slice(last, match.index));
      const mark = document.createElement("span");
      mark.className = "cp";
      mark.textContent = `<${codeName(match[0])}>`;
      mark.title = "an invisible or text-reordering character, shown as its code point";
      fragment.append(mark);
      last = match.index + match[0].length;
    }
    if (last < text.length) fragment.append(text.slice(last));
    return fragment;
  }

  // An element with a class and children; strings become text nodes, never markup.
  function h(tag, cls, ...kids) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : visible(String(kid)));
    }
    return node;
  }

  // node.append(...items) without spreading: a huge value makes too many arguments.
  function appendAll(node, items) {
    const fragment = document.createDocumentFragment();
    for (const item of items) fragment.append(typeof item === "string" ? visible(item) : item);
    node.append(fragment);
  }

  function attr(node, name, value) {
    node.setAttribute(name, String(value));
    return node;
  }

  const isObject = (v) =>
    v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Num);

  const plural = (n, word, words) => `${n} ${n === 1 ? word : words || word + "s"}`;
  const fmtInt = (n) => Number(num(n)).toLocaleString("en-US");

  function scalarText(v) {
    if (v instanceof Num) return v.source;
    if (typeof v === "string") return JSON.stringify(v);
    return String(v);
  }

  function clip(text, width) {
    const s = String(text).replace(/\s+/g, " ").trim();
    return s.length > width ? s.slice(0, width - 1) + "…" : s;
  }

  // ------------------------------------------------------------------ values

  // Pretty JSON as colored spans (keys, strings, numbers, literals); as plain
  // strings when `plain` (a big value: one text node instead of thousands of spans).
  function jsonNodes(v, indent, out, plain) {
    if (Array.isArray(v)) {
      if (!v.length) return void out.push("[]");
      const inner = indent + "  ";
      out.push("[\n");
      v.forEach((item, index) => {
        out.push(inner);
        jsonNodes(item, inner, out, plain);
        out.push(index + 1 < v.length ? ",\n" : "\n");
      });
      return void out.push(indent + "]");
    }
    if (isObject(v)) {
      const keys = Object.keys(v);
      if (!keys.length) return void out.push("{}");
      const inner = indent + "  ";
      out.push("{\n");
      keys.forEach((key, index) => {
        const name = JSON.stringify(key);
        out.push(inner, plain ? name : h("span", "j-key", name), ": ");
        jsonNodes(v[key], inner, out, plain);
        out.push(index + 1 < keys.length ? ",\n" : "\n");
      });
      return void out.push(indent + "}");
    }
    const text = scalarText(v);
    if (plain) return void out.push(text);
    const cls =
      typeof v === "string" ? "j-str" : v === null || typeof v === "boolean" ? "j-lit" : "j-num";
    out.push(h("span", cls, text));
  }

  function compactText(v) {
    if (Array.isArray(v)) return "[" + v.map(compactText).join(", ") + "]";
    if (isObject(v)) {
      return (
        "{" +
        Object.keys(v)
          .map((k) => JSON.stringify(k) + ": " + compactText(v[k]))
          .join(", ") +
        "}"
      );
    }
    return scalarText(v);
  }

  const CLAMP_LINES = 14;
  const CLAMP_CHARS = 1200;

  // A long value shows its first lines, faded, with a button that shows all of it.
  // The whole value enters the page only then: laying out a 200,000-line value
  // would take seconds even if it were hidden.
  function clamp(text, tag, cls, build) {
    let lines = 1;
    for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", at + 1)) lines++;
    if (text.length <= CLAMP_CHARS && lines <= CLAMP_LINES) return build();
    const head = text.split("\n", CLAMP_LINES).join("\n").slice(0, CLAMP_CHARS);
    const preview = h(tag, cls + " clamped", head);
    const label = `Show all · ${fmtInt(text.length)} characters, ${plural(lines, "line")}`;
    const button = h("button", "more", label);
    button.type = "button";
    const box = h("div", "clamp-box", preview, button);
    let full = null;
    button.addEventListener("click", () => {
      const shown = box.firstChild;
      if (shown === preview) {
        full = full || build();
        box.replaceChild(full, preview);
        button.textContent = "Show less";
      } else {
        box.replaceChild(preview, shown);
        button.textContent = label;
      }
    });
    return box;
  }

  function jsonBlock(v) {
    const compact = compactText(v);
    if (compact.length <= 90) return h("code", "json inline", compact);
    const plain = [];
    jsonNodes(v, "", plain, true);
    const text = plain.join("");
    return clamp(text, "pre", "json", () => {
      if (compact.length > 20000) return h("pre", "json", text); // no colors: too many spans
      const out = [];
      jsonNodes(v, "", out, false);
      const pre = h("pre", "json");
      appendAll(pre, out);
      return pre;
    });
  }

  function textBlock(text, cls) {
    return clamp(text, "div", cls || "prose", () => h("div", cls || "prose", text));
  }

  // Tool output: JSON shown pretty, anything else as text.
  function contentBlock(text) {
    const trimmed = text.trim();
    if (
      (trimmed.startsWith("{") && trimmed.endsWith("}")) ||
      (trimmed.startsWith("[") && trimmed.endsWith("]"))
    ) {
      try {
        return jsonBlock(JSON.parse(trimmed, reviver));
      } catch (error) {
        // not JSON after all: plain text
      }
    }
    if (!text.length) return h("div", "muted", "(empty)");
    return textBlock(text, "output");
  }

  function chip(text, cls) {
    return h("span", "chip" + (cls ? " " + cls : ""), text);
  }

  function kv(pairs) {
    const dl = h("dl", "kv");
    for (const [key, value] of pairs) {
      if (value === undefined) continue;
      dl.append(
        h("dt", null, key),
        h("dd", null, value instanceof Node ? value : scalarTextOrPlain(value)),
      );
    }
    return dl;
  }

  const scalarTextOrPlain = (v) =>
    typeof v === "string" ? v : isObject(v) || Array.isArray(v) ? jsonBlock(v) : scalarText(v);

  // Fields of an event, reply or block that the renderer for its type did not show
  // (a newer agentloop may add some): listed generically, so nothing is hidden.
  function extras(obj, shown) {
    const rest = Object.keys(obj).filter((k) => !shown.includes(k));
    if (!rest.length) return null;
    return kv(
      rest.map((k) => [
        k,
        typeof obj[k] === "string" ? textBlock(obj[k], "prose field") : jsonBlock(obj[k]),
      ]),
    );
  }

  const evExtras = (e, shown) => extras(e, [...shown, ...COMMON_FIELDS]);

  // The parts of the input and output tokens a model may report (0: not reported).
  const USAGE_PARTS = [
    ["cache_read_tokens", "cache read"],
    ["cache_write_tokens", "cache write"],
    ["reasoning_tokens", "reasoning"],
  ];
  const USAGE_FIELDS = ["input_tokens", "output_tokens", ...USAGE_PARTS.map(([key]) => key)];

  // "80 cache read, 30 reasoning", or "" when the model reported none of them.
  function usageParts(usage) {
    return USAGE_PARTS.filter(([key]) => num(usage[key] || 0))
      .map(([key, name]) => `${fmtInt(usage[key])} ${name}`)
      .join(", ");
  }

  function usageText(usage) {
    if (!usage) return null;
    const text = `${fmtInt(usage.input_tokens)} in · ${fmtInt(usage.output_tokens)} out`;
    const parts = usageParts(usage);
    return parts ? `${text} (${parts})` : text;
  }

  // Adds the usage a model reply reports (and its attempts') to `total`; whether any.
  function addReplyUsage(total, r) {
    let any = false;
    const attempts = Array.isArray(r.attempts) ? r.attempts : [];
    for (const usage of [...attempts.map((a) => a && a.usage), r.usage]) {
      if (!isObject(usage)) continue;
      for (const key of USAGE_FIELDS) total[key] = (total[key] || 0) + num(usage[key] || 0);
      any = true;
    }
    return any;
  }

  // The models a fallback tried before this reply, one line each.
  function attemptsBlock(attempts) {
    if (!Array.isArray(attempts) || !attempts.length) return null;
    return h(
      "div",
      "attempts",
      h("div", "block-label", "tried first"),
      ...attempts.map((a) =>
        isObject(a)
          ? h(
              "div",
              "failure",
              h("strong", null, a.model),
              " ",
              [a.kind, a.status_code].filter((x) => x !== null && x !== undefined).join(" "),
              ": ",
              a.error,
              a.usage ? chip(usageText(a.usage), "usage") : null,
            )
          : jsonBlock(a),
      ),
    );
  }

  const stopMessage = (r) =>
    r.stop_message === null || r.stop_message === undefined
      ? null
      : kv([["stop message", textBlock(r.stop_message, "prose field")]]);

  const stopClass = (reason) =>
    reason === "error" || reason === "length" || reason === "refusal" ? "warn" : "";

  // ------------------------------------------------------------------ blocks, messages, replies

  function block(b) {
    if (!isObject(b)) return h("div", "block", jsonBlock(b));
    switch (b.type) {
      case "text":
        return h("div", "block text", textBlock(b.text), extras(b, ["type", "text"]));
      case "thinking":
        return h(
          "div",
          "block thinking",
          h("div", "block-label", "thinking"),
          textBlock(b.text, "prose thought"),
          extras(b, ["type", "text", "signature"]),
        );
      case "tool_call":
        return h(
          "div",
          "block call",
          h("div", "call-head", h("span", "fn", b.name), h("span", "id", b.id)),
          jsonBlock(b.arguments),
          extras(b, ["type", "id", "name", "arguments"]),
        );
      case "image":
      case "audio":
      case "document":
        return mediaBlock(b);
      case "provider": // opaque state a provider needs back (the loop never reads it)
        return h(
          "div",
          "block generic",
          h("div", "block-label", `${b.provider} ${b.kind}`),
          jsonBlock(b.data),
          extras(b, ["type", "provider", "kind", "data"]),
        );
      default:
        return h(
          "div",
          "block generic",
          h("div", "block-label", String(b.type)),
          extras(b, ["type"]),
        );
    }
  }

  // Media blocks: the page holds each blob once (DATA.blobs, by SHA-256); a block's
  // "data" is the blob's hash. Only images of these types are drawn (as data URLs,
  // which the page's CSP allows and nothing else); the rest are named.
  const INLINE_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

  function mediaBlock(b) {
    const blob = typeof b.data === "string" ? BLOBS[b.data] : undefined;
    const label = [b.type, String(b.media_type)];
    if (typeof b.name === "string") label.push(b.name);
    const parts = [h("div", "block-label", label.join(" "))];
    if (blob) {
      parts.push(h("div", "muted", `${fmtInt(blob.size)} bytes · sha256 ${b.data}`));
      if (b.type === "image" && INLINE_IMAGES.has(b.media_type)) {
        const img = h("img", "media");
        img.alt = label.join(" ");
        img.src = `data:${b.media_type};base64,${blob.data}`;
        parts.push(img);
      }
    } else if (typeof b.url === "string") {
      parts.push(h("div", "muted", `url ${b.url}`));
    }
    return h("div", "block media", ...parts, extras(b, ["type", "media_type", "data", "url", "name"]));
  }

  // A user message's or tool result's content: a string, or a list of parts.
  function partsOrText(content, text) {
    return Array.isArray(content) ? blocks(content) : text(content);
  }

  function blocks(list) {
    if (!Array.isArray(list) || !list.length) return h("div", "muted", "(no content)");
    return h("div", "blocks", ...list.map(block));
  }

  // Head chips and body nodes for one message.
  function messageParts(m) {
    if (!isObject(m)) return { head: [], body: [jsonBlock(m)] };
    if (m.role === "user") {
      return {
        head: [chip("user", "role"), chip(m.id, "id")],
        body: [partsOrText(m.content, textBlock), extras(m, ["role", "id", "content"])],
      };
    }
    if (m.role === "assistant") {
      return {
        head: [chip("assistant", "role"), chip(m.id, "id")],
        body: [blocks(m.content), extras(m, ["role", "id", "content"])],
      };
    }
    if (m.role === "tool_result") {
      return {
        head: [
          chip("tool result", m.is_error ? "role bad" : "role"),
          h("span", "fn", m.tool_name),
          chip(m.tool_call_id, "id"),
        ],
        body: [
          partsOrText(m.content, contentBlock),
          extras(m, ["role", "id", "tool_call_id", "tool_name", "content", "is_error"]),
        ],
      };
    }
    return { head: [chip(String(m.role), "role")], body: [extras(m, [])] };
  }

  function reply(r) {
    if (!isObject(r)) return jsonBlock(r);
    const at = (fields) => extras(r, [...fields, "kind", "at"]);
    switch (r.kind) {
      case "model_response":
        return h(
          "div",
          "reply",
          h(
            "div",
            "reply-head",
            chip("response", "role"),
            chip(r.id, "id"),
            chip("stop: " + r.stop_reason),
            r.usage ? chip(usageText(r.usage), "usage") : null,
          ),
          blocks(r.content),
          stopMessage(r),
          attemptsBlock(r.attempts),
          at(["request_id", "id", "content", "stop_reason", "usage", "stop_message", "attempts"]),
        );
      case "model_failure":
        return h(
          "div",
          "reply",
          h(
            "div",
            "failure",
            h("strong", null, r.code),
            " ",
            r.message,
            r.usage ? chip(usageText(r.usage), "usage") : null,
          ),
          attemptsBlock(r.attempts),
          at(["request_id", "message", "code", "usage", "attempts"]),
        );
      case "model_chunk":
        return h("div", "reply", block(r.block), at(["request_id", "block"]));
      case "tool_result":
        return h(
          "div",
          "reply",
          h(
            "div",
            "reply-head",
            chip("tool result", r.is_error ? "role bad" : "role"),
            chip(r.call_id, "id"),
          ),
          contentBlock(r.content),
          at(["call_id", "content", "is_error"]),
        );
      case "resume":
        return h(
          "div",
          "reply",
          kv([
            ["payload", r.payload === null ? "none" : jsonBlock(r.payload)],
            ["new budget", r.budget ? budgetText(r.budget) : undefined],
          ]),
          at(["payload", "budget"]),
        );
      case "cancel":
        return h("div", "reply", kv([["cancel", r.reason || "(no reason)"]]), at(["reason"]));
      case "unrecognized":
        return h("div", "reply", kv([["unrecognized reply", r.description]]), at(["description"]));
      default:
        return h("div", "reply", h("div", "block-label", String(r.kind)), extras(r, ["kind"]));
    }
  }

  function budgetText(b) {
    if (!isObject(b)) return scalarText(b);
    const part = (v, unit) => (v === null || v === undefined ? "∞" : scalarText(v) + (unit || ""));
    return `turns ${part(b.max_turns)} · tool calls ${part(b.max_tool_calls)} · wall clock ${part(b.max_wall_seconds, " s")}`;
  }

  // ------------------------------------------------------------------ events

  // Each renderer returns {cls, label, head: [nodes], body: [nodes]}.
  const RENDER = {
    "session.start"(e) {
      const tools = (e.tools || []).map((t) =>
        h(
          "div",
          "tool",
          h(
            "div",
            "tool-head",
            h("span", "fn", t.name),
            t.requires_approval ? chip("needs approval", "warn") : null,
            t.sequential ? chip("sequential", "tool-chip") : null,
            h("span", "muted", t.description || ""),
          ),
          h("details", "schema", h("summary", null, "parameters"), jsonBlock(t.parameters)),
          extras(t, ["name", "description", "parameters", "requires_approval", "sequential"]),
        ),
      );
      return {
        cls: "start",
        label: "session start",
        head: [chip(plural((e.tools || []).length, "tool"))],
        body: [
          kv([
            ["max steps", e.max_steps],
            ["budget", e.budget ? budgetText(e.budget) : "none"],
            ["system", e.system === null ? "none" : textBlock(e.system)],
            ["engine rules", e.rules],
            ["tool calls", e.parallel_tools ? "a step's calls run at once (parallel_tools)" : undefined],
            ["loop limits", isObject(e.limits) ? jsonBlock(e.limits) : undefined],
            [
              "structured output",
              isObject(e.output)
                ? h(
                    "div",
                    null,
                    h("span", "fn", e.output.name),
                    ` · ${plural(num(e.output.retries), "retry", "retries")}`,
                    jsonBlock(e.output.schema),
                  )
                : undefined,
            ],
            ["agent", typeof e.agent === "string" ? h("span", "fn", e.agent) : undefined],
            [
              "handoffs",
              Array.isArray(e.handoffs) && e.handoffs.length ? jsonBlock(e.handoffs) : undefined,
            ],
          ]),
          tools.length ? h("div", "tools", ...tools) : null,
          evExtras(e, [
            "system",
            "tools",
            "max_steps",
            "budget",
            "request_sequence_start",
            "rules",
            "parallel_tools",
            "limits",
            "output",
            "agent",
            "handoffs",
          ]),
        ],
      };
    },
    "message.accepted"(e) {
      const parts = messageParts(e.message);
      return {
        cls: "message",
        label: "message",
        head: parts.head,
        body: [...parts.body, evExtras(e, ["message"])],
      };
    },
    "step.start"(e) {
      return {
        cls: "compact",
        label: "step start",
        head: [chip(e.request_id, "id")],
        body: [evExtras(e, ["request_id"])],
      };
    },
    "model.chunk"(e) {
      const c = e.chunk || {};
      const b = c.block || {};
      let preview;
      if (b.type === "text" || b.type === "thinking")
        preview = h("span", b.type === "thinking" ? "chunk-text thought" : "chunk-text", b.text);
      else if (b.type === "tool_call")
        preview = h("span", "chunk-text", h("span", "fn", b.name), " ", compactText(b.arguments));
      else preview = h("span", "chunk-text", compactText(b));
      return {
        cls: "compact chunk",
        label: b.type ? String(b.type) : "chunk",
        head: [preview],
        body: [extras(c, ["kind", "request_id", "block", "at"]), evExtras(e, ["chunk"])],
      };
    },
    "plan.draft"(e) {
      const r = e.reply || {};
      if (r.kind === "model_failure") {
        return {
          cls: "error",
          label: "model failed",
          head: [chip(r.code, "bad"), r.usage ? chip(usageText(r.usage), "usage") : null],
          body: [
            h("div", "failure", r.message),
            attemptsBlock(r.attempts),
            extras(r, ["kind", "request_id", "message", "code", "at", "usage", "attempts"]),
            evExtras(e, ["reply"]),
          ],
        };
      }
      if (r.kind !== "model_response")
        return {
          cls: "model",
          label: "model reply",
          head: [],
          body: [reply(r), evExtras(e, ["reply"])],
        };
      return {
        cls: "model",
        label: "model",
        head: [
          chip(r.id, "id"),
          chip("stop: " + r.stop_reason, stopClass(r.stop_reason)),
          r.usage ? chip(usageText(r.usage), "usage") : null,
        ],
        body: [
          blocks(r.content),
          stopMessage(r),
          attemptsBlock(r.attempts),
          extras(r, [
            "kind",
            "request_id",
            "id",
            "content",
            "stop_reason",
            "usage",
            "at",
            "stop_message",
            "attempts",
          ]),
          evExtras(e, ["reply"]),
        ],
      };
    },
    "plan.commit"(e, i) {
      const m = e.message || {};
      const draft = i > 0 ? EVENTS[i - 1] : null;
      const same =
        draft &&
        draft.type === "plan.draft" &&
        draft.reply &&
        JSON.stringify(draft.reply.content) === JSON.stringify(m.content);
      const n = Array.isArray(m.content) ? m.content.length : 0;
      return {
        cls: "compact",
        label: "committed",
        head: [
          chip(m.id, "id"),
          h(
            "span",
            "muted",
            same
              ? `the response above (${plural(n, "block")}) joins the transcript`
              : `${plural(n, "block")} join the transcript`,
          ),
        ],
        body: [
          same ? null : blocks(m.content),
          extras(m, ["role", "id", "content"]),
          evExtras(e, ["message"]),
        ],
      };
    },
    "tool.call"(e) {
      const c = e.call || {};
      return {
        cls: "tool",
        label: "tool call",
        head: [h("span", "fn", c.name), chip(c.id, "id")],
        body: [
          jsonBlock(c.arguments),
          extras(c, ["type", "id", "name", "arguments"]),
          evExtras(e, ["call"]),
        ],
      };
    },
    "tool.result"(e) {
      return toolOutcome(e, false);
    },
    "tool.error"(e) {
      return toolOutcome(e, true);
    },
    "step.end"(e) {
      return { cls: "compact", label: "step end", head: [], body: [evExtras(e, [])] };
    },
    "agent.handoff"(e) {
      const kept = Array.isArray(e.kept) ? e.kept : null;
      return {
        cls: "pause",
        label: "handoff",
        head: [
          h("span", "fn", String(e.from_agent)),
          h("span", "muted", " → "),
          h("span", "fn", String(e.to_agent)),
          chip(e.call_id, "id"),
        ],
        body: [
          kv([
            [
              "the new agent sees",
              kept === null ? "the whole transcript" : `${plural(kept.length, "earlier message")} (its input filter's)`,
            ],
          ]),
          kept === null ? null : jsonBlock(kept),
          evExtras(e, ["from_agent", "to_agent", "call_id", "kept"]),
        ],
      };
    },
    "context.compacted"(e) {
      const summary = e.summary || null;
      const summarized = e.how === "summarize";
      return {
        cls: "pause",
        label: "compacted",
        head: [
          chip(summarized ? "summary" : "trimmed tool results", "warn"),
          h(
            "span",
            "muted",
            `the model's view: about ${scalarText(e.tokens_before || 0)} → ${scalarText(e.tokens_after || 0)} tokens`,
          ),
        ],
        body: [
          kv([
            ["view starts at message", scalarText(e.start || 0)],
            ["tool results trimmed before", scalarText(e.trimmed_before || 0)],
          ]),
          summary ? textBlock(String(summary.content), "output") : null,
          evExtras(e, ["how", "start", "summary", "trimmed_before", "tokens_before", "tokens_after"]),
        ],
      };
    },
    "budget.warn"(e) {
      const u = e.usage || {};
      const b = e.budget || {};
      const used = (v, limit, unit = "") =>
        `${scalarText(v)}${unit} of ${limit === null || limit === undefined ? "∞" : scalarText(limit) + unit}`;
      return {
        cls: "pause",
        label: "budget",
        head: [chip(e.limit + " limit reached", "warn")],
        body: [
          kv([
            ["turns", used(u.turns, b.max_turns)],
            ["tool calls", used(u.tool_calls, b.max_tool_calls)],
            ["wall clock", used(u.wall_seconds, b.max_wall_seconds, " s")],
          ]),
          evExtras(e, ["limit", "usage", "budget"]),
        ],
      };
    },
    "session.pause"(e) {
      return {
        cls: "pause",
        label: "paused",
        head: [chip(e.reason, "warn")],
        body: [
          e.payload === null ? null : kv([["payload", jsonBlock(e.payload)]]),
          evExtras(e, ["reason", "payload"]),
        ],
      };
    },
    "session.resume"(e) {
      return {
        cls: "resume",
        label: "resumed",
        head: [],
        body: [reply(e.reply), evExtras(e, ["reply"])],
      };
    },
    "session.complete"(e) {
      return {
        cls: "compact",
        label: "complete",
        head: [
          chip(e.status, statusClass(e.status)),
          e.reason ? h("span", "muted", e.reason) : null,
        ],
        body: [evExtras(e, ["status", "reason"])],
      };
    },
    "run.finished"(e) {
      return {
        cls: "finished " + statusClass(e.status),
        label: "run finished",
        head: [
          chip(e.status, statusClass(e.status)),
          e.reason ? h("span", "muted", e.reason) : null,
        ],
        body: [
          e.error
            ? h("div", "failure", h("strong", null, e.error.code), " ", e.error.message)
            : null,
          e.final_text !== null && e.final_text !== undefined ? textBlock(e.final_text) : null,
          kv([
            ["steps", `${scalarText(e.steps)} of max ${scalarText(e.max_steps)}`],
            ["usage", usageText(e.usage) || undefined],
            ["ended by", e.reply ? reply(e.reply) : undefined],
            [
              "structured output",
              e.output === null || e.output === undefined ? undefined : jsonBlock(e.output),
            ],
          ]),
          evExtras(e, [
            "status",
            "final_text",
            "steps",
            "max_steps",
            "error",
            "usage",
            "reason",
            "reply",
            "output",
          ]),
        ],
      };
    },
  };

  function toolOutcome(e, isError) {
    const m = e.message || {};
    const byLoop = e.reply === null || e.reply === undefined;
    return {
      cls: isError ? "error" : "tool",
      label: isError ? "tool error" : "tool result",
      head: [
        h("span", "fn", m.tool_name),
        chip(m.tool_call_id, "id"),
        byLoop ? chip("made by the loop", "muted-chip") : null,
      ],
      body: [
        partsOrText(m.content, contentBlock),
        extras(m, ["role", "id", "tool_call_id", "tool_name", "content", "is_error"]),
        e.reply ? extras(e.reply, ["kind", "call_id", "content", "is_error", "at"]) : null,
        evExtras(e, ["message", "reply"]),
      ],
    };
  }

  function renderGeneric(e) {
    return { cls: "generic", label: String(e.type), head: [], body: [evExtras(e, [])] };
  }

  const statusClass = (status) =>
    status === "completed" ? "good" : status === "failed" ? "bad" : "warn";

  // ------------------------------------------------------------------ time

  const TIMES = EVENTS.map((e) => (e.at === null || e.at === undefined ? null : num(e.at)));
  const START = TIMES.find((t) => t !== null);
  const seconds = (s) => (s < 10 ? s.toFixed(3) : s < 100 ? s.toFixed(2) : s.toFixed(1)) + " s";

  // Last time minus first time of `times` (nulls skipped), or null. A loop, not
  // Math.max(...times): spreading 100,000 values overflows the stack.
  function span(times) {
    let low = Infinity;
    let high = -Infinity;
    for (const t of times) {
      if (t === null) continue;
      if (t < low) low = t;
      if (t > high) high = t;
    }
    return low === Infinity ? null : high - low;
  }

  function clock(i) {
    const t = TIMES[i];
    if (t === null || START === undefined) return "";
    return "+" + seconds(t - START).replace(" s", "s");
  }

  // ------------------------------------------------------------------ one event row

  const rowOf = new Map(); // index -> rendered row

  function eventRow(i) {
    const e = EVENTS[i];
    let parts;
    try {
      parts = (Object.hasOwn(RENDER, e.type) ? RENDER[e.type] : renderGeneric)(e, i);
    } catch (error) {
      parts = renderGeneric(e); // an event of a shape this viewer does not know
    }
    const row = h("article", "ev " + parts.cls);
    row.id = "e" + i;
    row.dataset.index = String(i);
    row.dataset.type = String(e.type);
    row.tabIndex = -1;
    row.hidden = !passes(i);
    if (REPORT && !REPORT.ok && REPORT.index === i) row.classList.add("diverged");
    const seq = h("a", "seq", "#" + scalarText(e.sequence));
    attr(seq, "href", "#e" + i);
    const time = h("span", "clock", clock(i));
    if (TIMES[i] !== null) attr(time, "title", "at " + scalarText(e.at));
    const raw = h("button", "raw-toggle", "{ }");
    raw.type = "button";
    attr(raw, "title", "the event as logged");
    attr(raw, "aria-label", "show the event as logged");
    const head = h(
      "div",
      "head",
      h("span", "label", parts.label),
      ...parts.head.filter(Boolean),
      raw,
    );
    const card = h("div", "card", head, ...parts.body.filter(Boolean));
    if (REPORT && !REPORT.ok && REPORT.index === i) {
      card.prepend(h("div", "diverged-note", "⚠ " + REPORT.title));
    }
    if (childAt.has(i)) card.append(childSession(childAt.get(i)));
    row.append(h("div", "gutter", seq, time), card);
    rowOf.set(i, row);
    return row;
  }

  // ------------------------------------------------------------------ groups (steps)

  const groups = [];
  const groupOf = new Int32Array(EVENTS.length);
  {
    let key = null;
    EVENTS.forEach((e, i) => {
      const outcome = OUTCOME_TYPES.has(e.type);
      const session = sessionOf[i];
      const k = session + (outcome ? " outcome" : " step " + scalarText(e.step));
      if (k !== key) {
        key = k;
        groups.push({ key: k, outcome, step: num(e.step), start: i, end: i + 1, session });
      } else {
        groups[groups.length - 1].end = i + 1;
      }
      groupOf[i] = groups.length - 1;
    });
  }

  function groupStats(g) {
    const s = {
      tools: 0,
      errors: 0,
      pauses: 0,
      usage: null,
      preview: "",
      failed: false,
      chunks: 0,
    };
    for (let i = g.start; i < g.end; i++) {
      const e = EVENTS[i];
      if (e.type === "tool.call") s.tools++;
      else if (e.type === "tool.error") s.errors++;
      else if (e.type === "session.pause" || e.type === "budget.warn") s.pauses++;
      else if (e.type === "model.chunk") s.chunks++;
      else if (e.type === "plan.draft" && e.reply) {
        const usage = s.usage || {};
        if (addReplyUsage(usage, e.reply)) s.usage = usage;
        if (e.reply.kind === "model_failure") {
          s.failed = true;
          s.preview = s.preview || `${e.reply.code}: ${e.reply.message}`;
        } else if (e.reply.kind === "model_response") {
          const text = (e.reply.content || []).find((b) => b && b.type === "text");
          const call = (e.reply.content || []).find((b) => b && b.type === "tool_call");
          s.preview =
            s.preview ||
            (text ? text.text : call ? `→ ${call.name}(${compactText(call.arguments)})` : "");
        }
      } else if (e.type === "message.accepted" && e.message && e.message.role === "user") {
        const content = e.message.content;
        s.preview =
          s.preview ||
          (Array.isArray(content)
            ? content.map((b) => (b && b.type === "text" ? b.text : `[${b && b.type}]`)).join("")
            : content);
      } else if (e.type === "run.finished") {
        s.failed = e.status === "failed";
        s.preview = e.error
          ? `${e.error.code}: ${e.error.message}`
          : e.final_text || e.reason || "";
      }
    }
    s.duration = span(TIMES.slice(g.start, g.end));
    return s;
  }

  function groupTitle(g) {
    if (g.outcome) return "Outcome";
    if (g.step === 0) return "Session";
    return "Step " + g.step;
  }

  const usedIds = new Set();

  function groupSection(g, index) {
    const s = (g.stats = groupStats(g));
    const details = h(
      "details",
      "group" + (g.outcome ? " outcome" : "") + (g.session ? " nested" : ""),
    );
    const base =
      (g.session ? `s${g.session}.` : "") +
      (g.outcome ? "outcome" : g.step === 0 ? "session" : "step-" + scalarText(g.step));
    let id = base;
    for (let n = 2; usedIds.has(id); n++) id = `${base}.${n}`; // a step seen twice
    usedIds.add(id);
    details.id = id;
    details.dataset.group = String(index);
    const badges = h("span", "badges");
    if (s.tools) badges.append(chip(plural(s.tools, "tool call"), "tool-chip"));
    if (s.errors) badges.append(chip(plural(s.errors, "error"), "bad"));
    if (s.failed) badges.append(chip("failed", "bad"));
    if (s.pauses) badges.append(chip("paused", "warn"));
    if (
      REPORT &&
      !REPORT.ok &&
      REPORT.index !== null &&
      REPORT.index >= g.start &&
      REPORT.index < g.end
    ) {
      badges.append(chip("diverges", "bad"));
      details.classList.add("has-divergence");
    }
    const summary = h(
      "summary",
      null,
      h("span", "group-title", groupTitle(g)),
      badges,
      h("span", "preview", clip(s.preview || "", 140)),
      h(
        "span",
        "group-meta",
        s.usage ? h("span", "usage", usageText(s.usage)) : null,
        s.duration !== null ? h("span", "dur", seconds(s.duration)) : null,
        h("span", "count", plural(g.end - g.start, "event")),
      ),
    );
    const body = h("div", "events");
    details.append(summary, body);
    g.details = details;
    g.body = body;
    g.rendered = false;
    details.addEventListener("toggle", () => {
      if (details.open) renderGroup(g);
    });
    return details;
  }

  // A child session (DESIGN §26), nested under the tool.call that ran it: a
  // collapsible block with its own steps (and its own children under its calls).
  function childSession(k) {
    const s = SESSIONS[k];
    let finished = null;
    let steps = 0;
    for (let i = s.start; i < s.end; i++) {
      if (EVENTS[i].type === "run.finished") finished = EVENTS[i];
      else if (EVENTS[i].type === "step.start") steps++;
    }
    const status = finished ? String(finished.status) : "unfinished";
    const summary = h(
      "summary",
      null,
      h("span", "label", "child session"),
      h("span", "child-source", s.source),
      chip(status, statusClass(status)),
      chip(plural(steps, "step")),
      chip(plural(s.end - s.start, "event")),
      finished && finished.final_text
        ? h("span", "preview", clip(String(finished.final_text), 100))
        : null,
    );
    const body = h("div", "child-timeline");
    appendAll(
      body,
      groups.filter((g) => g.session === k).map((g) => g.details),
    );
    const details = h("details", "child-session", summary, body);
    details.id = "session-" + k;
    details.dataset.session = String(k);
    s.details = details;
    if (EVENTS.length <= EXPAND_BY_DEFAULT) details.open = true;
    return details;
  }

  const chunkGroupOf = new Map(); // index -> the chunk group holding it

  function renderGroup(g) {
    if (g.rendered) return;
    g.rendered = true;
    const out = [];
    let i = g.start;
    while (i < g.end) {
      if (EVENTS[i].type !== "model.chunk") {
        out.push(eventRow(i));
        i++;
        continue;
      }
      let j = i;
      while (j < g.end && EVENTS[j].type === "model.chunk") j++;
      out.push(chunkGroup(i, j));
      i = j;
    }
    appendAll(g.body, out);
  }

  // A run of streamed chunks: one line saying what streamed; the chunks on demand.
  function chunkGroup(start, end) {
    let text = "";
    const calls = [];
    for (let i = start; i < end; i++) {
      const b = (EVENTS[i].chunk || {}).block || {};
      if (b.type === "text" && text.length < 400) text += b.text;
      else if (b.type === "tool_call") calls.push(b.name);
    }
    const cg = { start, end, rendered: false };
    const when = clock(start);
    const summary = h(
      "summary",
      null,
      h("span", "label", "streamed"),
      chip(plural(end - start, "chunk")),
      text ? h("span", "chunk-text", clip(text, 120)) : null,
      calls.length ? h("span", "chunk-text", "→ " + clip(calls.join(", "), 80)) : null,
      when ? h("span", "clock", when) : null,
    );
    const list = h("div", "chunk-list");
    const details = h("details", "chunks", summary, list);
    cg.details = details;
    cg.render = () => {
      if (cg.rendered) return;
      cg.rendered = true;
      const rows = [];
      for (let i = start; i < end; i++) rows.push(eventRow(i));
      appendAll(list, rows);
    };
    details.addEventListener("toggle", () => {
      if (details.open) cg.render();
    });
    for (let i = start; i < end; i++) chunkGroupOf.set(i, cg);
    if (
      REPORT &&
      !REPORT.ok &&
      REPORT.index !== null &&
      REPORT.index >= start &&
      REPORT.index < end
    ) {
      cg.render(); // the divergence is among these chunks: show them
      details.open = true;
    }
    return details;
  }

  // One listener for every row's "{ }" button: show or hide the event as logged.
  function toggleRaw(event) {
    const button = event.target.closest ? event.target.closest(".raw-toggle") : null;
    if (!button) return;
    const row = button.closest(".ev");
    const card = row.querySelector(":scope > .card");
    const open = card.querySelector(":scope > .raw");
    if (open) open.remove();
    else card.append(h("div", "raw", jsonBlock(EVENTS[Number(row.dataset.index)])));
  }

  // Open whatever holds event i, render it, and return its row.
  function reveal(i) {
    const k = sessionOf[i];
    if (k > 0) {
      reveal(SESSIONS[k].call); // the call's row holds the child session
      SESSIONS[k].details.open = true;
    }
    const g = groups[groupOf[i]];
    renderGroup(g);
    g.details.open = true;
    const cg = chunkGroupOf.get(i);
    if (cg) {
      cg.render();
      cg.details.open = true;
    }
    return rowOf.get(i);
  }

  function focusRow(row, keepFocus) {
    document.querySelectorAll(".ev.current").forEach((r) => r.classList.remove("current"));
    row.classList.add("current");
    if (!keepFocus) row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "center" });
  }

  function setAll(open) {
    for (const g of groups) {
      if (open) renderGroup(g); // parents first: a child's block is in its call's row
      g.details.open = open;
    }
    for (const s of SESSIONS) if (s.details) s.details.open = open;
    if (open) {
      for (const cg of new Set(chunkGroupOf.values())) {
        cg.render();
        cg.details.open = true;
      }
    }
  }

  // ------------------------------------------------------------------ totals

  function totals() {
    const t = {
      steps: 0,
      tools: 0,
      errors: 0,
      pauses: 0,
      usage: {},
      finished: null,
    };
    let summed = false;
    for (const e of EVENTS.slice(0, ROOT_END)) {
      if (e.type === "step.start") t.steps++;
      else if (e.type === "tool.call") t.tools++;
      else if (e.type === "tool.error") t.errors++;
      else if (e.type === "session.pause") t.pauses++;
      else if (e.type === "run.finished") t.finished = e;
      else if (e.type === "plan.draft" && isObject(e.reply) && addReplyUsage(t.usage, e.reply))
        summed = true;
    }
    const reported =
      t.finished &&
      t.finished.usage &&
      (num(t.finished.usage.input_tokens) || num(t.finished.usage.output_tokens));
    if (reported) t.usage = t.finished.usage;
    else if (!summed) t.usage = null; // no response reported usage: "–", not "0 / 0"
    t.duration = span(TIMES.slice(0, ROOT_END));
    return t;
  }

  // ------------------------------------------------------------------ page

  function stat(value, label, cls) {
    return h(
      "div",
      "stat" + (cls ? " " + cls : ""),
      h("div", "stat-value", value),
      h("div", "stat-label", label),
    );
  }

  function header(t) {
    const status = t.finished ? t.finished.status : ROOT_END ? "unfinished" : "empty";
    const kids = SESSIONS.length - 1;
    const eventsLabel = [
      "events",
      t.pauses ? plural(t.pauses, "pause") : null,
      kids ? plural(kids, "child session") : null,
    ];
    const stats = h(
      "div",
      "stats",
      stat(
        status,
        t.finished && t.finished.reason ? t.finished.reason : "status",
        "status " + statusClass(status),
      ),
      stat(
        fmtInt(t.steps),
        t.finished ? `steps of max ${scalarText(t.finished.max_steps)}` : "steps",
      ),
      stat(
        fmtInt(t.tools),
        t.errors ? `tool calls · ${plural(t.errors, "error")}` : "tool calls",
        t.errors ? "has-errors" : "",
      ),
      stat(
        t.usage ? fmtInt(t.usage.input_tokens) + " / " + fmtInt(t.usage.output_tokens) : "–",
        t.usage && usageParts(t.usage)
          ? `tokens in / out · ${usageParts(t.usage)}`
          : "tokens in / out",
      ),
      stat(t.duration === null ? "–" : seconds(t.duration), "duration"),
      stat(fmtInt(ROOT_END), eventsLabel.filter(Boolean).join(" · ")),
    );
    const title = h(
      "div",
      "title",
      h("h1", null, "agentloop session"),
      h("span", "source", META.source),
    );
    return h("header", "top", title, stats);
  }

  function toolbar() {
    const search = h("input", "search");
    search.type = "search";
    search.id = "search";
    attr(search, "placeholder", "Search events  ( / )");
    attr(search, "aria-label", "search the events");
    attr(search, "autocomplete", "off");
    const count = h("span", "search-count");
    const button = (label, title, fn) => {
      const b = h("button", "tool-button", label);
      b.type = "button";
      attr(b, "title", title);
      b.addEventListener("click", fn);
      return b;
    };
    const bar = h(
      "div",
      "toolbar",
      search,
      count,
      filterControls(),
      h("span", "spacer"),
      button("Expand all", "open every step and every streamed chunk (e)", () => setAll(true)),
      button("Collapse all", "close every step (c)", () => setAll(false)),
      button("?", "keyboard shortcuts (?)", () => toggleHelp()),
    );
    bar.id = "toolbar";
    wireSearch(search, count);
    return bar;
  }

  function minimap() {
    const steps = groups.filter((g) => !g.session && !g.outcome && g.step !== 0);
    if (!steps.length) return null;
    const durations = steps.map((g) => g.stats.duration);
    const timed = durations.every((d) => d !== null) && durations.some((d) => d > 0);
    const longest = timed ? durations.reduce((a, b) => Math.max(a, b), 0) : 1;
    const nav = h("nav", "minimap");
    attr(nav, "aria-label", "steps");
    for (const g of steps) {
      const s = g.stats;
      const tick = h(
        "a",
        "tick" + (s.failed || s.errors ? " bad" : s.pauses ? " warn" : s.tools ? " tool" : ""),
      );
      attr(tick, "href", "#" + g.details.id);
      attr(
        tick,
        "title",
        `${groupTitle(g)} · ${plural(s.tools, "tool call")}${s.duration !== null ? " · " + seconds(s.duration) : ""}`,
      );
      // Relative to the longest step, so the widths always add up to the whole bar.
      tick.style.flexGrow = String(timed ? Math.max(s.duration / longest, 0.001) : 1);
      if (g.details.classList.contains("has-divergence")) tick.classList.add("diverges");
      tick.addEventListener("click", (event) => {
        event.preventDefault();
        renderGroup(g);
        g.details.open = true;
        g.details.querySelector("summary").focus({ preventScroll: true });
        g.details.scrollIntoView({ block: "start" });
      });
      nav.append(tick);
    }
    return h("div", "minimap-box", h("div", "minimap-label", "timeline"), nav);
  }

  function reportPanel() {
    if (!REPORT) return null;
    const panel = h("section", "report " + (REPORT.ok ? "ok" : "bad"));
    panel.id = "report";
    panel.append(h("h2", null, (REPORT.ok ? "✓ " : "✗ ") + REPORT.title));
    if (REPORT.text) panel.append(h("p", null, REPORT.text));
    if (REPORT.ok) return panel;
    const side = (label, summary, event) =>
      h(
        "div",
        "side",
        h("div", "side-label", label),
        h("div", "side-summary", summary),
        event === null
          ? null
          : h("details", "side-raw", h("summary", null, "event as logged"), jsonBlock(event)),
      );
    panel.append(
      h(
        "div",
        "sides",
        side(REPORT.labels[0], REPORT.left_summary, REPORT.left),
        side(REPORT.labels[1], REPORT.right_summary, REPORT.right),
      ),
    );
    if (REPORT.differences.length) {
      panel.append(
        h("h3", null, `Differences (${REPORT.labels[0]} → ${REPORT.labels[1]})`),
        h("ul", "differences", ...REPORT.differences.map((d) => h("li", null, d))),
      );
    }
    if (REPORT.hint) panel.append(h("p", "hint", "Hint: " + REPORT.hint));
    if (REPORT.index !== null && REPORT.index < EVENTS.length) {
      const jump = h("button", "tool-button", "Show it in the timeline  ( d )");
      jump.type = "button";
      jump.id = "jump-divergence";
      jump.addEventListener("click", () => focusRow(reveal(REPORT.index)));
      panel.append(jump);
    }
    return panel;
  }

  function helpPanel() {
    const keys = [
      ["j / k", "next / previous step"],
      ["Enter, Space", "open or close the focused step"],
      ["e / c", "expand / collapse everything"],
      ["/", "search; Enter and Shift+Enter go through the matches"],
      ["n / N", "next / previous match"],
      ["x", "next error"],
      ["d", "the divergence, when there is one"],
      ["?", "this help; Esc closes it"],
    ];
    const panel = h(
      "div",
      "help",
      h("h2", null, "Keyboard"),
      h(
        "dl",
        "kv",
        ...keys.flatMap(([k, v]) => [h("dt", null, h("kbd", null, k)), h("dd", null, v)]),
      ),
    );
    panel.id = "help";
    panel.hidden = true;
    return panel;
  }

  function toggleHelp(force) {
    const panel = document.getElementById("help");
    panel.hidden = force === undefined ? !panel.hidden : !force;
  }

  // ------------------------------------------------------------------ filter

  // Which events are shown: one event type, the events of one tool, errors only (all
  // in the page: nothing is fetched). A step with no event left is hidden.
  const FILTER = { type: "", tool: "", errors: false };

  // The tools an event is about: its call, its result, the calls a response makes.
  function toolsOf(e) {
    if (e.type === "tool.call") return [e.call && e.call.name];
    if (e.type === "tool.result" || e.type === "tool.error") return [e.message && e.message.tool_name];
    if (e.type === "model.chunk") {
      const b = (e.chunk || {}).block || {};
      return b.type === "tool_call" ? [b.name] : [];
    }
    if (e.type === "plan.draft" || e.type === "plan.commit") {
      const content = (e.type === "plan.draft" ? (e.reply || {}).content : (e.message || {}).content) || [];
      return Array.isArray(content)
        ? content.filter((b) => b && b.type === "tool_call").map((b) => b.name)
        : [];
    }
    return [];
  }

  function passes(i) {
    const e = EVENTS[i];
    if (FILTER.type && e.type !== FILTER.type) return false;
    if (FILTER.tool && !toolsOf(e).includes(FILTER.tool)) return false;
    if (FILTER.errors && !ERROR_SET.has(i)) return false;
    return true;
  }

  const filtering = () => Boolean(FILTER.type || FILTER.tool || FILTER.errors);

  function applyFilter() {
    let shown = 0;
    for (const g of groups) {
      let any = false;
      for (let i = g.start; i < g.end; i++) {
        if (passes(i)) {
          any = true;
          shown++;
        }
      }
      g.details.hidden = !any;
      if (any && filtering()) {
        renderGroup(g);
        g.details.open = true;
      }
    }
    for (const [i, row] of rowOf) row.hidden = !passes(i);
    for (const cg of new Set(chunkGroupOf.values())) {
      let any = false;
      for (let i = cg.start; i < cg.end && !any; i++) any = passes(i);
      cg.details.hidden = !any;
      if (any && filtering()) {
        cg.render();
        cg.details.open = true;
      }
    }
    const count = document.getElementById("filter-count");
    count.textContent = filtering() ? `${fmtInt(shown)} of ${plural(EVENTS.length, "event")}` : "";
  }

  function select(id, label, first, values) {
    const node = h("select", "filter", h("option", null, first));
    node.id = id;
    node.firstChild.value = "";
    for (const value of values) {
      const option = h("option", null, value);
      option.value = value;
      node.append(option);
    }
    attr(node, "aria-label", label);
    return node;
  }

  function filterControls() {
    const types = [...new Set(EVENTS.map((e) => String(e.type)))];
    const tools = [...new Set(EVENTS.flatMap((e, i) => toolsOf(e)).filter((t) => typeof t === "string"))].sort();
    const byType = select("filter-type", "show only events of this type", "all events", types);
    const byTool = select("filter-tool", "show only the events of this tool", "all tools", tools);
    const errors = h("input", null);
    errors.type = "checkbox";
    errors.id = "filter-errors";
    const errorsLabel = h("label", "filter-errors", errors, " errors only");
    const update = () => {
      FILTER.type = byType.value;
      FILTER.tool = byTool.value;
      FILTER.errors = errors.checked;
      applyFilter();
    };
    for (const control of [byType, byTool, errors]) control.addEventListener("change", update);
    const count = h("span", "filter-count");
    count.id = "filter-count";
    return h("span", "filters", byType, byTool, errorsLabel, count);
  }

  // ------------------------------------------------------------------ search

  const haystacks = [];
  function haystack(i) {
    if (haystacks[i] === undefined) {
      const parts = [];
      const walk = (v) => {
        if (Array.isArray(v)) v.forEach(walk);
        else if (isObject(v)) {
          for (const k of Object.keys(v)) {
            parts.push(k);
            walk(v[k]);
          }
        } else parts.push(v instanceof Num ? v.source : String(v));
      };
      walk(EVENTS[i]);
      haystacks[i] = parts.join("\n").toLowerCase();
    }
    return haystacks[i];
  }

  const search = { query: "", matches: [], at: -1, count: null };

  function runSearch(query) {
    search.query = query.trim().toLowerCase();
    search.matches = [];
    search.at = -1;
    if (search.query) {
      for (let i = 0; i < EVENTS.length; i++)
        if (passes(i) && haystack(i).includes(search.query)) search.matches.push(i);
    }
    showCount();
  }

  function showCount() {
    if (!search.query) search.count.textContent = "";
    else if (!search.matches.length) search.count.textContent = "no match";
    else
      search.count.textContent =
        search.at < 0
          ? plural(search.matches.length, "match", "matches")
          : `${search.at + 1} of ${search.matches.length}`;
  }

  function step(direction) {
    if (!search.matches.length) return;
    search.at = (search.at + direction + search.matches.length) % search.matches.length;
    document.querySelectorAll(".ev.hit").forEach((r) => r.classList.remove("hit"));
    const row = reveal(search.matches[search.at]);
    row.classList.add("hit");
    focusRow(row, document.activeElement && document.activeElement.id === "search");
    showCount();
  }

  function wireSearch(input, count) {
    search.count = count;
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => runSearch(input.value), 120);
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        clearTimeout(timer);
        if (input.value.trim().toLowerCase() !== search.query) runSearch(input.value);
        step(event.shiftKey ? -1 : 1);
      } else if (event.key === "Escape") {
        input.blur();
      }
    });
  }

  // ------------------------------------------------------------------ keyboard

  const ERRORS = [];
  EVENTS.forEach((e, i) => {
    if (
      e.type === "tool.error" ||
      (e.type === "plan.draft" && e.reply && e.reply.kind === "model_failure") ||
      (e.type === "run.finished" && e.error)
    ) {
      ERRORS.push(i);
    }
  });
  const ERROR_SET = new Set(ERRORS);
  let errorAt = -1;

  // The step of the top session that holds the focus (a child's steps are inside one).
  function currentGroup() {
    const active = document.activeElement;
    let holder = active && active.closest ? active.closest("details.group") : null;
    while (holder && holder.classList.contains("nested"))
      holder = holder.parentElement.closest("details.group");
    return holder ? Number(holder.dataset.group) : -1;
  }

  const rootGroups = groups.filter((g) => !g.session).length; // (they come first)

  function moveGroup(direction) {
    if (!rootGroups) return;
    const next = Math.min(Math.max(currentGroup() + direction, 0), rootGroups - 1);
    const summary = groups[next].details.querySelector("summary");
    summary.focus({ preventScroll: true });
    groups[next].details.scrollIntoView({ block: "start" });
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target && ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName)) return;
    const actions = {
      j: () => moveGroup(1),
      k: () => moveGroup(-1),
      e: () => setAll(true),
      c: () => setAll(false),
      "/": () => document.getElementById("search").focus(),
      n: () => step(1),
      N: () => step(-1),
      x: () => {
        if (!ERRORS.length) return;
        errorAt = (errorAt + 1) % ERRORS.length;
        focusRow(reveal(ERRORS[errorAt]));
      },
      d: () => {
        if (REPORT && !REPORT.ok && REPORT.index !== null && REPORT.index < EVENTS.length)
          focusRow(reveal(REPORT.index));
      },
      "?": () => toggleHelp(),
      Escape: () => toggleHelp(false),
    };
    const action = Object.hasOwn(actions, event.key) ? actions[event.key] : null;
    if (action) {
      event.preventDefault();
      action();
    }
  });

  // ------------------------------------------------------------------ build

  const app = document.getElementById("app");
  document.title = visibleText(META.title);
  const sections = groups.map(groupSection);
  const t = totals();
  const timeline = h("main", "timeline");
  timeline.id = "timeline";
  timeline.addEventListener("click", toggleRaw);
  if (!EVENTS.length) timeline.append(h("p", "empty", "This log has no events."));
  appendAll(
    timeline,
    sections.filter((_, index) => !groups[index].session),
  );
  const parts = [
    header(t),
    toolbar(),
    META.torn ? h("div", "banner bad", META.torn) : null,
    reportPanel(),
    minimap(),
    timeline,
    h(
      "footer",
      null,
      `Rendered by ${META.generator}. Keys: j/k steps · e/c expand/collapse · / search · x errors · ? help`,
    ),
    helpPanel(),
  ];
  app.append(...parts.filter(Boolean));
  const small = EVENTS.length <= EXPAND_BY_DEFAULT;
  const lastStep = groups.filter((g) => !g.session && !g.outcome).pop();
  groups.forEach((g) => {
    const holdsDivergence = g.details.classList.contains("has-divergence");
    if (small || g.outcome || holdsDivergence || g === lastStep) {
      renderGroup(g);
      g.details.open = true;
    }
  });
  document.body.dataset.ready = "true";
})();
