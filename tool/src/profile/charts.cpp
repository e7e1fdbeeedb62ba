#include "profile/charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

namespace memprofile {

namespace {

// Text for SVG: valid UTF-8 (other bytes become '?'), XML-escaped.
std::string xml(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (!ok || (n == 1 && c < 0x20 && c != '\t')) {
      out += '?';
      ++i;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.append(s, i, n);
    }
    i += n;
  }
  return out;
}


std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A warm colour from the name, so a function keeps its colour across views.
std::string colour(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  int r = 205 + static_cast<int>(h % 50), g = static_cast<int>((h >> 8) % 180), b = static_cast<int>((h >> 16) % 55);
  return "rgb(" + std::to_string(r) + "," + std::to_string(g) + "," + std::to_string(b) + ")";
}

std::string label(const Frame& f) {
  if (!f.function.empty()) return f.function;
  char b[40];
  std::snprintf(b, sizeof b, "+0x%llx", static_cast<unsigned long long>(f.module_offset));
  return f.module + b;
}

// The browser side of the flame graph: zoom, reset, search, and the same
// from the URL fragment. It records what it did on the root element
// (data-state), which is what the tests read back from the browser.
const char* kFlameScript = R"JS(
var W = 1200, PAD = 10, frames = [], svg = null, status = null, matchedText = null;
function init() {
  svg = document.documentElement;
  frames = Array.prototype.slice.call(document.querySelectorAll("g.f"));
  status = document.getElementById("status");
  matchedText = document.getElementById("matched");
  frames.forEach(function (g, i) {
    g.addEventListener("click", function () { zoom(i); });
    g.addEventListener("mouseover", function () { status.textContent = g.querySelector("title").textContent; });
    g.addEventListener("mouseout", function () { status.textContent = " "; });
  });
  document.getElementById("reset").addEventListener("click", function () { zoom(0); });
  document.getElementById("search").addEventListener("click", function () {
    var re = prompt("Search frames (regular expression):", "");
    if (re !== null) search(re);
  });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {
      e.preventDefault();
      var re = prompt("Search frames (regular expression):", "");
      if (re !== null) search(re);
    }
  });
  var hash = decodeURIComponent(location.hash.slice(1));
  if (hash.indexOf("zoom=") === 0) zoom(parseInt(hash.slice(5), 10) || 0);
  else if (hash.indexOf("search=") === 0) search(hash.slice(7));
  else svg.setAttribute("data-state", "ready");
}
function num(g, k) { return parseFloat(g.getAttribute("data-" + k)); }
function place(g, x, w) {
  var r = g.querySelector("rect"), t = g.querySelector("text");
  r.setAttribute("x", PAD + x * (W - 2 * PAD));
  r.setAttribute("width", Math.max(0, w * (W - 2 * PAD) - 0.5));
  t.setAttribute("x", PAD + x * (W - 2 * PAD) + 3);
  var chars = Math.floor((w * (W - 2 * PAD) - 6) / 7), name = g.getAttribute("data-n");
  t.textContent = chars < 3 ? "" : name.length <= chars ? name : name.slice(0, chars - 2) + "..";
}
function zoom(i) {
  if (i < 0 || i >= frames.length) i = 0;
  var z = frames[i], x0 = num(z, "x"), w0 = num(z, "w"), d0 = num(z, "d"), shown = 0;
  frames.forEach(function (g) {
    var x = num(g, "x"), w = num(g, "w"), d = num(g, "d");
    var inside = x >= x0 - 1e-9 && x + w <= x0 + w0 + 1e-9;
    if (d >= d0 && inside) { place(g, (x - x0) / w0, w / w0); g.style.display = ""; g.style.opacity = 1; shown++; }
    else if (d < d0 && x <= x0 + 1e-9 && x + w >= x0 + w0 - 1e-9) { place(g, 0, 1); g.style.display = ""; g.style.opacity = 0.5; shown++; }
    else g.style.display = "none";
  });
  document.getElementById("reset").style.display = i === 0 ? "none" : "";
  svg.setAttribute("data-state", "zoom:" + i + ":" + z.getAttribute("data-n") + ":" + shown);
}
function search(re) {
  var rx;
  try { rx = new RegExp(re); } catch (e) { svg.setAttribute("data-state", "search-error"); return; }
  var spans = [];
  frames.forEach(function (g) {
    var r = g.querySelector("rect");
    if (rx.test(g.getAttribute("data-n"))) {
      r.setAttribute("fill", "rgb(230,0,230)");
      spans.push([num(g, "x"), num(g, "x") + num(g, "w")]);
    } else r.setAttribute("fill", g.getAttribute("data-c"));
  });
  // Matched share: the union of the matching frames' spans (nested ones
  // are not counted twice).
  spans.sort(function (a, b) { return a[0] - b[0]; });
  var total = 0, end = -1;
  spans.forEach(function (s) {
    if (s[0] > end) { total += s[1] - s[0]; end = s[1]; }
    else if (s[1] > end) { total += s[1] - end; end = s[1]; }
  });
  var pct = (100 * total).toFixed(1);
  matchedText.textContent = spans.length ? "Matched: " + pct + "%" : "";
  svg.setAttribute("data-state", "search:" + spans.length + ":" + pct);
}
)JS";

struct Node {
  std::string name;
  double value = 0;
  std::map<std::string, size_t> children;
};

}  // namespace

std::vector<FoldedStack> folded_stacks(const HeapSnapshot& snap, Symbolizer& symbolizer) {
  std::vector<const Mapping*> sorted = sorted_maps(snap);
  size_t outside = 0;
  std::map<std::vector<std::string>, double> merged;
  for (const auto& sample : snap.stacks) {
    std::vector<Frame> frames = stack_frames(snap, sorted, sample, symbolizer, outside);
    size_t first = site_frame(frames);
    std::vector<std::string> names;
    for (size_t i = frames.size(); i > first; --i) names.push_back(label(frames[i - 1]));
    merged[names] += sample.bytes;
  }
  std::vector<FoldedStack> out;
  for (auto& [frames, bytes] : merged) out.push_back({frames, bytes});
  return out;
}

std::vector<FoldedStack> grown_stacks(const std::vector<FoldedStack>& first, const std::vector<FoldedStack>& last) {
  std::map<std::vector<std::string>, double> delta;
  for (const auto& s : last) delta[s.frames] += s.bytes;
  for (const auto& s : first) delta[s.frames] -= s.bytes;
  std::vector<FoldedStack> out;
  for (auto& [frames, bytes] : delta)
    if (bytes > 0) out.push_back({frames, bytes});
  return out;
}

std::string flamegraph_svg(const std::vector<FoldedStack>& stacks, const std::string& title, const std::string& subtitle) {
  // The tree of stacks, the root ("all") first.
  std::vector<Node> nodes(1);
  nodes[0].name = "all";
  for (const auto& s : stacks) {
    if (s.bytes <= 0) continue;
    size_t at = 0;
    nodes[0].value += s.bytes;
    for (const auto& f : s.frames) {
      auto it = nodes[at].children.find(f);
      size_t next;
      if (it == nodes[at].children.end()) {
        next = nodes.size();
        nodes[at].children[f] = next;
        nodes.push_back(Node{f, 0, {}});
      } else {
        next = it->second;
      }
      at = next;
      nodes[at].value += s.bytes;
    }
  }
  const double total = nodes[0].value;
  const int frame_h = 16;
  // Frames narrower than a tenth of a pixel are left out (and counted).
  const double min_share = 0.1 / 1180;
  struct Placed {
    size_t node;
    double x, w;
    int depth;
  };
  std::vector<Placed> placed;
  size_t pruned = 0;
  int max_depth = 0;
  std::function<void(size_t, double, int)> lay = [&](size_t n, double x, int depth) {
    double w = total > 0 ? nodes[n].value / total : 0;
    if (w < min_share && n != 0) {
      ++pruned;
      return;
    }
    placed.push_back({n, x, w, depth});
    max_depth = std::max(max_depth, depth);
    // Children by name, as flame graphs sort them (widths then read as parts).
    double cx = x;
    for (const auto& [name, child] : nodes[n].children) {
      lay(child, cx, depth + 1);
      cx += total > 0 ? nodes[child].value / total : 0;
    }
  };
  if (total > 0) lay(0, 0, 0);
  const int top = 60, height = top + (max_depth + 1) * frame_h + 30;
  std::string svg;
  svg += "<?xml version=\"1.0\" standalone=\"no\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"1200\" height=\"" + std::to_string(height) +
         "\" viewBox=\"0 0 1200 " + std::to_string(height) + "\" onload=\"init()\" data-state=\"loading\">\n";
  svg += "<style>text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); } g.f:hover rect { stroke: black; "
         "stroke-width: 0.5; cursor: pointer; } .button { cursor: pointer; fill: rgb(40,40,160); }</style>\n";
  svg += "<script type=\"text/ecmascript\"><![CDATA[" + std::string(kFlameScript) + "]]></script>\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"1200\" height=\"" + std::to_string(height) + "\" fill=\"rgb(250,250,240)\"/>\n";
  svg += "<text x=\"600\" y=\"22\" text-anchor=\"middle\" style=\"font-size:16px\">" + xml(title) + "</text>\n";
  svg += "<text x=\"600\" y=\"40\" text-anchor=\"middle\">" + xml(subtitle) + "</text>\n";
  svg += "<text id=\"reset\" class=\"button\" x=\"10\" y=\"22\" style=\"display:none\">Reset Zoom</text>\n";
  svg += "<text id=\"search\" class=\"button\" x=\"1110\" y=\"22\">Search</text>\n";
  svg += "<text id=\"matched\" x=\"1110\" y=\"" + std::to_string(height - 10) + "\"> </text>\n";
  svg += "<text id=\"status\" x=\"10\" y=\"" + std::to_string(height - 10) + "\"> </text>\n";
  if (total <= 0) svg += "<text x=\"600\" y=\"80\" text-anchor=\"middle\">no bytes to show</text>\n";
  for (const auto& p : placed) {
    const Node& n = nodes[p.node];
    double px = 10 + p.x * 1180, pw = p.w * 1180;
    int y = height - 30 - (p.depth + 1) * frame_h;
    std::string c = p.node == 0 ? "rgb(200,200,200)" : colour(n.name);
    char share[16];
    std::snprintf(share, sizeof share, "%.2f", total > 0 ? 100 * n.value / total : 0);
    size_t chars = pw > 6 ? static_cast<size_t>((pw - 6) / 7) : 0;
    std::string shown = chars < 3 ? "" : n.name.size() <= chars ? n.name : n.name.substr(0, chars - 2) + "..";
    svg += "<g class=\"f\" data-x=\"" + std::to_string(p.x) + "\" data-w=\"" + std::to_string(p.w) + "\" data-d=\"" +
           std::to_string(p.depth) + "\" data-n=\"" + xml(n.name) + "\" data-c=\"" + c + "\"><title>" + xml(n.name) +
           " (" + human_bytes(n.value) + ", " + share + "%)</title><rect x=\"" + num(px) + "\" y=\"" + std::to_string(y) +
           "\" width=\"" + num(std::max(0.0, pw - 0.5)) + "\" height=\"" + std::to_string(frame_h - 1) + "\" fill=\"" +
           c + "\" rx=\"2\"/><text x=\"" + num(px + 3) + "\" y=\"" + std::to_string(y + 12) + "\">" + xml(shown) +
           "</text></g>\n";
  }
  if (pruned)
    svg += "<text x=\"600\" y=\"" + std::to_string(height - 10) + "\" text-anchor=\"middle\">" + std::to_string(pruned) +
           " frames narrower than 0.1 px left out</text>\n";
  svg += "</svg>\n";
  return svg;
}

std::string trend_svg(const SiteTable& table, const std::vector<const Site*>& sites,
                      const std::vector<std::string>& labels, const std::string& title,
                      const std::string& total_name) {
  const int W = 1000, H = 460, left = 90, right = 330, top = 50, bottom = 60;
  const int pw = W - left - right, ph = H - top - bottom;
  const size_t n = table.totals.size();
  // Every line fits: RSS drawn beside a heap's sites is above its total.
  double max = 1;
  for (double t : table.totals) max = std::max(max, t);
  for (const Site* s : sites)
    for (double b : s->bytes) max = std::max(max, b);
  auto xat = [&](size_t i) { return left + (n > 1 ? static_cast<double>(i) * pw / static_cast<double>(n - 1) : pw / 2.0); };
  auto yat = [&](double v) { return top + ph - v / max * ph; };
  static const char* palette[] = {"rgb(214,39,40)", "rgb(31,119,180)", "rgb(44,160,44)", "rgb(255,127,14)",
                                  "rgb(148,103,189)", "rgb(140,86,75)", "rgb(227,119,194)", "rgb(23,190,207)"};
  std::string svg;
  svg += "<?xml version=\"1.0\" standalone=\"no\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + std::to_string(W) + "\" height=\"" +
         std::to_string(H) + "\" viewBox=\"0 0 " + std::to_string(W) + " " + std::to_string(H) + "\">\n";
  svg += "<style>text { font-family: sans-serif; font-size: 12px; }</style>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + std::to_string(left) + "\" y=\"24\" style=\"font-size:16px\">" + xml(title) + "</text>\n";
  // Axes, with the bytes at 0, half and max, and the first and last labels.
  svg += "<line x1=\"" + std::to_string(left) + "\" y1=\"" + std::to_string(top) + "\" x2=\"" + std::to_string(left) +
         "\" y2=\"" + std::to_string(top + ph) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + std::to_string(left) + "\" y1=\"" + std::to_string(top + ph) + "\" x2=\"" +
         std::to_string(left + pw) + "\" y2=\"" + std::to_string(top + ph) + "\" stroke=\"black\"/>\n";
  for (double f : {0.0, 0.5, 1.0}) {
    svg += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + num(yat(f * max) + 4) + "\" text-anchor=\"end\">" +
           xml(human_bytes(f * max)) + "</text>\n";
    svg += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(left + pw) + "\" y1=\"" + num(yat(f * max)) +
           "\" y2=\"" + num(yat(f * max)) + "\" stroke=\"rgb(230,230,230)\"/>\n";
  }
  if (!labels.empty()) {
    svg += "<text x=\"" + num(xat(0)) + "\" y=\"" + std::to_string(top + ph + 18) + "\" text-anchor=\"start\">" +
           xml(labels.front()) + "</text>\n";
    if (n > 1)
      svg += "<text x=\"" + num(xat(n - 1)) + "\" y=\"" + std::to_string(top + ph + 18) + "\" text-anchor=\"end\">" +
             xml(labels.back()) + "</text>\n";
  }
  svg += "<text x=\"" + std::to_string(left + pw / 2) + "\" y=\"" + std::to_string(H - 14) +
         "\" text-anchor=\"middle\">snapshots (" + std::to_string(n) + ")</text>\n";
  auto line = [&](const std::vector<double>& v, const std::string& colour, const std::string& dash,
                  const std::string& name, int row) {
    std::string pts;
    for (size_t i = 0; i < v.size(); ++i) pts += (i ? " " : "") + num(xat(i)) + "," + num(yat(v[i]));
    svg += "<polyline class=\"series\" data-name=\"" + xml(name) + "\" fill=\"none\" stroke=\"" + colour +
           "\" stroke-width=\"2\"" + (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + " points=\"" + pts +
           "\"/>\n";
    int ly = top + 10 + row * 20;
    svg += "<line x1=\"" + std::to_string(W - right + 20) + "\" x2=\"" + std::to_string(W - right + 44) + "\" y1=\"" +
           std::to_string(ly) + "\" y2=\"" + std::to_string(ly) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"" +
           (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>\n";
    std::string shown = name.size() > 40 ? name.substr(0, 38) + ".." : name;
    svg += "<text x=\"" + std::to_string(W - right + 50) + "\" y=\"" + std::to_string(ly + 4) + "\">" + xml(shown) +
           "</text>\n";
  };
  line(table.totals, "black", "6,3", total_name + " (" + human_bytes(table.totals.empty() ? 0 : table.totals.back()) + ")", 0);
  for (size_t i = 0; i < sites.size() && i < 8; ++i)
    line(sites[i]->bytes, palette[i], "",
         label(sites[i]->frame) + " (" + human_bytes(sites[i]->bytes.back()) + ")" + (sites[i]->leak_suspect() ? " *" : ""),
         static_cast<int>(i) + 1);
  svg += "<text x=\"" + std::to_string(W - right + 20) + "\" y=\"" + std::to_string(top + 10 + 10 * 20) +
         "\">* leak suspect: rose at every snapshot</text>\n";
  svg += "</svg>\n";
  return svg;
}

}  // namespace memprofile
