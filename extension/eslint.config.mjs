// Lints the extension's TypeScript: the recommended rules, plus the one this
// extension's safety rests on: no markup parsing of strings (kernel text is untrusted).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

const noMarkupSinks = [
  { selector: "AssignmentExpression[left.property.name='innerHTML']", message: 'Build DOM with dom.ts (text nodes), never innerHTML.' },
  { selector: "AssignmentExpression[left.property.name='outerHTML']", message: 'Build DOM with dom.ts (text nodes), never outerHTML.' },
  { selector: "CallExpression[callee.property.name='insertAdjacentHTML']", message: 'Build DOM with dom.ts (text nodes).' },
  { selector: "CallExpression[callee.property.name='createContextualFragment']", message: 'Build DOM with dom.ts (text nodes).' }
];

export default tseslint.config(
  { ignores: ['lib/', 'node_modules/', '*.config.*'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ['src/**/*.ts', 'test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      'no-restricted-syntax': ['error', ...noMarkupSinks],
      eqeqeq: ['error', 'smart'],
      curly: ['error', 'all']
    }
  }
);
