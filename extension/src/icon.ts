/** The sidebar tab's icon: a small directed graph. */
import { LabIcon } from '@jupyterlab/ui-components';

const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">
  <g class="jp-icon3" fill="#616161">
    <circle cx="3" cy="3" r="2"/><circle cx="13" cy="3" r="2"/><circle cx="8" cy="13" r="2.2"/>
    <path d="M3.8 4.6l3.4 6.6-.9.5-3.4-6.6zM12.2 4.6l-3.4 6.6.9.5 3.4-6.6z"/>
  </g>
</svg>`;

export const xlaIcon = new LabIcon({ name: 'xlalab:xla', svgstr: svg });
