import { customType } from 'drizzle-orm/pg-core'

// drizzle's own jsonb() hands the driver JSON.stringify(value), and Bun.SQL encodes a string bound
// to a jsonb parameter as a JSON *string*: an object landed as '"{\"a\":1}"' (jsonb_typeof
// 'string'), which `->>`, `@>` and anyone reading the database directly cannot see into. This type
// hands Bun.SQL the value itself, which it stores as that JSON value. Reads accept the old wrapped
// form too (Bun.SQL returns it as the string of the value's text): every jsonb column of the schema
// holds an object or an array, so a string read back is always that form.
export const jsonb = customType<{ data: unknown; driverData: unknown }>({
  dataType: () => 'jsonb',
  toDriver: (value) => value,
  fromDriver: (value) => (typeof value === 'string' ? JSON.parse(value) : value),
})
