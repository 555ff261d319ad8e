// Migrations are imported as text (Bun's `with { type: 'text' }`) so they travel inside the binary.
declare module '*.sql' {
  const text: string
  export default text
}
// The API reference UI's browser build, embedded as a file (`with { type: 'file' }` gives its path).
declare module '*/standalone.js' {
  const path: string
  export default path
}
