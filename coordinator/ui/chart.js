// A live line chart of queue depth as inline SVG: one line per series, the newest sample right.
const NS = 'http://www.w3.org/2000/svg';
const W = 1000;
const H = 200;
const PAD = 28;

function svg(tag, attrs) {
  const node = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

export function depthChart(series, samples, capacity) {
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img' });
  const top = Math.max(1, ...samples.flatMap(s => series.map(name => s[name])));
  const x = i => PAD + ((W - 2 * PAD) * (i + capacity - samples.length)) / (capacity - 1);
  const y = v => H - PAD - ((H - 2 * PAD) * v) / top;
  root.append(svg('line', { x1: PAD, y1: y(0), x2: W - PAD, y2: y(0), class: 'axis' }));
  const label = svg('text', { x: 4, y: y(top) + 4, class: 'tick' });
  label.textContent = String(top);
  root.append(label);
  for (const name of series) {
    const points = samples.map((s, i) => `${x(i)},${y(s[name])}`).join(' ');
    root.append(svg('polyline', { points, class: `line ${name}` }));
  }
  series.forEach((name, i) => {
    const text = svg('text', { x: W - PAD - 80 * (series.length - i), y: 14, class: `key ${name}` });
    const last = samples.length ? samples[samples.length - 1][name] : 0;
    text.textContent = `${name} ${last}`;
    root.append(text);
  });
  return root;
}
