// Migrations are imported as text (Bun's `with { type: 'text' }`) so they travel inside the binary.
declare module '*.sql' {
  const text: string
  export default text
}
