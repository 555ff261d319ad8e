// Passwords with Bun.password (argon2id). Costs are injectable so the test suite can hash cheaply;
// the server always uses Bun's argon2id defaults. Verification reads the cost from the hash itself.

export interface Passwords {
  hash(password: string): Promise<string>
  verify(password: string, hash: string): Promise<boolean>
  /** Spends the time of a real verification; used when the email is unknown (no user enumeration). */
  burn(password: string): Promise<void>
}

export function createPasswords(cost?: { memoryCost: number; timeCost: number }): Passwords {
  const options = { algorithm: 'argon2id' as const, ...cost }
  let dummy: Promise<string> | undefined
  return {
    hash: (password) => Bun.password.hash(password, options),
    verify: (password, hash) => Bun.password.verify(password, hash).catch(() => false),
    async burn(password) {
      dummy ??= Bun.password.hash('gridkeep-timing-equaliser', options)
      await Bun.password.verify(password, await dummy).catch(() => false)
    },
  }
}
