// map.js draws the map (carte) of a play: 7 × 7 cells, the 9 chests
// (coffres), the pawn (pion), the compass (boussole) and the counter
// (compteur). Each element carries the stable test hooks of docs/web.md:
// data-chest (with data-symbol once opened), data-pawn, data-compass,
// data-counter. Symbols are drawn with distinct shapes and named in text,
// so that the map reads without colour.

import { el } from './common.js';

const SVG = 'http://www.w3.org/2000/svg';
const SHAPES = {
  cross: '<path d="M6 6 L18 18 M18 6 L6 18" stroke-width="3"/>',
  chandelier: '<path d="M12 3 v5 M5 10 h14 M6 10 v5 M12 10 v5 M18 10 v5 M4 20 h16 M12 15 v5" stroke-width="2" fill="none"/><circle cx="6" cy="8" r="1.5"/><circle cx="12" cy="8" r="1.5"/><circle cx="18" cy="8" r="1.5"/>',
  monkey: '<circle cx="12" cy="13" r="7"/><circle cx="4.5" cy="11" r="2.5"/><circle cx="19.5" cy="11" r="2.5"/><circle cx="9.5" cy="12" r="1.2" class="hole"/><circle cx="14.5" cy="12" r="1.2" class="hole"/><path d="M9 16 q3 2 6 0" class="hole" fill="none" stroke-width="1.5"/>',
  sapphire: '<path d="M12 3 L20 10 L12 21 L4 10 Z"/><path d="M4 10 h16 M12 3 L9 10 L12 21 L15 10 Z" class="hole" fill="none" stroke-width="1"/>',
  skull: '<path d="M5 11 a7 7 0 1 1 14 0 v4 h-3 v4 h-8 v-4 h-3 z"/><circle cx="9" cy="11" r="2" class="hole"/><circle cx="15" cy="11" r="2" class="hole"/>',
};
export const SYMBOL_TEXT = { cross: 'empty', chandelier: 'chandelier', monkey: 'monkey', sapphire: 'sapphire', skull: 'skull' };

// icon is a symbol's shape, hidden from screen readers (the text says it).
export function icon(symbol) {
  const s = document.createElementNS(SVG, 'svg');
  s.setAttribute('viewBox', '0 0 24 24');
  s.setAttribute('aria-hidden', 'true');
  s.setAttribute('class', 'icon ' + symbol);
  s.innerHTML = SHAPES[symbol] || '';
  return s;
}

const ANGLE = { N: 0, NE: 45, E: 90, SE: 135, S: 180, SW: 225, W: 270, NW: 315 };
const DIRECTION_TEXT = { N: 'north', NE: 'north-east', E: 'east', SE: 'south-east', S: 'south', SW: 'south-west', W: 'west', NW: 'north-west' };

// GameMap is one play's map in a container.
export class GameMap {
  constructor(container, play) {
    this.rows = play.map.rows;
    this.cols = play.map.cols;
    this.cells = [];
    const grid = el('div', { class: 'map', role: 'grid', 'aria-label': `Map, ${this.rows} rows by ${this.cols} columns` });
    for (let r = 0; r < this.rows; r++) {
      const row = el('div', { class: 'row', role: 'row' });
      for (let c = 0; c < this.cols; c++) {
        const cell = el('div', { class: 'cell', role: 'gridcell', 'data-row': r, 'data-col': c, 'aria-label': `row ${r + 1}, column ${c + 1}` });
        this.cells.push(cell);
        row.append(cell);
      }
      grid.append(row);
    }
    this.chests = play.chests.map((ch, i) => {
      const e = el('div', { class: 'chest', 'data-chest': i, role: 'img', 'aria-label': 'closed chest' }, el('span', { class: 'label' }, 'chest'));
      this.cell(ch.cell).append(e);
      return e;
    });
    if (play.start) this.cell(play.start).classList.add('start');
    this.pawn = el('div', { class: 'pawn', 'data-pawn': '', role: 'img', 'aria-label': 'pawn' });
    this.compass = el('div', { class: 'compass', 'data-compass': '', role: 'img', 'aria-label': 'compass: no throw yet' },
      el('div', { class: 'needle' }), el('span', { class: 'dir' }, '·'));
    this.counter = el('div', { class: 'counter', 'data-counter': '', 'aria-label': 'counter: no throw yet' }, '–');
    const side = el('div', { class: 'instruments' },
      el('figure', {}, this.compass, el('figcaption', {}, 'Compass')),
      el('figure', {}, this.counter, el('figcaption', {}, 'Counter')));
    container.replaceChildren(el('div', { class: 'board' }, grid, side));
    play.chests.forEach((ch, i) => { if (ch.symbol) this.open(i, ch.symbol); });
    this.move(play.start || play.pawn);
  }

  cell(c) { return this.cells[c.row * this.cols + c.col]; }

  // move puts the pawn on a cell.
  move(c) {
    this.cell(c).append(this.pawn);
    this.pawn.dataset.row = c.row;
    this.pawn.dataset.col = c.col;
    this.pawn.setAttribute('aria-label', `pawn on row ${c.row + 1}, column ${c.col + 1}`);
  }

  // open shows a chest's symbol.
  open(i, symbol) {
    const e = this.chests[i];
    e.dataset.symbol = symbol;
    e.classList.add('open', symbol);
    e.setAttribute('aria-label', 'chest: ' + SYMBOL_TEXT[symbol]);
    e.replaceChildren(icon(symbol), el('span', { class: 'label' }, SYMBOL_TEXT[symbol]));
  }

  // hideAll closes every chest (a replay starts with the map as first shown).
  hideAll() {
    this.chests.forEach(e => {
      delete e.dataset.symbol;
      e.className = 'chest';
      e.setAttribute('aria-label', 'closed chest');
      e.replaceChildren(el('span', { class: 'label' }, 'chest'));
    });
  }

  // throwTo shows a throw: the compass's direction, the counter's steps,
  // the pawn's move and, if any, the chest it opened.
  throwTo(t) {
    this.compass.querySelector('.needle').style.transform = `rotate(${ANGLE[t.direction]}deg)`;
    this.compass.querySelector('.dir').textContent = t.direction;
    this.compass.dataset.direction = t.direction;
    this.compass.setAttribute('aria-label', 'compass: ' + DIRECTION_TEXT[t.direction]);
    this.counter.textContent = t.steps;
    this.counter.dataset.steps = t.steps;
    this.counter.setAttribute('aria-label', `counter: ${t.steps} cell${t.steps > 1 ? 's' : ''}`);
    this.move(t.pawn);
    if (t.chest != null) this.open(t.chest, t.symbol);
  }

  // reset puts the instruments back to "no throw yet".
  reset(start) {
    this.compass.querySelector('.needle').style.transform = '';
    this.compass.querySelector('.dir').textContent = '·';
    delete this.compass.dataset.direction;
    this.counter.textContent = '–';
    delete this.counter.dataset.steps;
    this.move(start);
  }
}
