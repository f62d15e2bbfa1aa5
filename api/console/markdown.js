// A small markdown renderer that builds DOM nodes: headings, paragraphs, lists, block quotes,
// fenced code, inline code, bold, italics and http(s) links. Model output is hostile input:
// nothing here ever assigns innerHTML, so `<script>` or `<img onerror>` in an answer is shown
// as the text it is; links to anything but http(s) stay plain text.

import { h } from "./dom.js";

const INLINE = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*)|(\[[^\]]+\]\([^)\s]+\))/;

export function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) { out.push(rest); break; }
    if (m.index) out.push(rest.slice(0, m.index));
    const token = m[0];
    if (m[1]) out.push(h("code", {}, token.slice(1, -1)));
    else if (m[2]) out.push(h("strong", {}, inline(token.slice(2, -2))));
    else if (m[3]) out.push(h("em", {}, inline(token.slice(1, -1))));
    else {
      const label = token.slice(1, token.indexOf("]("));
      const url = token.slice(token.indexOf("](") + 2, -1);
      out.push(/^https?:\/\//i.test(url)
        ? h("a", { href: url, rel: "noopener noreferrer nofollow", target: "_blank" }, label)
        : `${label} (${url})`);
    }
    rest = rest.slice(m.index + token.length);
  }
  return out;
}

export function markdown(source) {
  const root = h("div", { class: "md" });
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^```/.test(line)) {
      const body = [];
      for (i++; i < lines.length && !/^```/.test(lines[i]); i++) body.push(lines[i]);
      i++;
      root.append(h("pre", {}, h("code", {}, body.join("\n"))));
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      root.append(h(`h${Math.min(6, heading[1].length + 2)}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        list.append(h("li", {}, inline(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""))));
        i++;
      }
      root.append(list);
      continue;
    }
    if (/^>\s?/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^>\s?/.test(lines[i])) quoted.push(lines[i++].replace(/^>\s?/, ""));
      root.append(h("blockquote", {}, inline(quoted.join(" "))));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^(```|#{1,6}\s|>|\s*([-*+]|\d+[.)])\s+)/.test(lines[i])) {
      para.push(lines[i++]);
    }
    root.append(h("p", {}, inline(para.join(" "))));
  }
  return root;
}
