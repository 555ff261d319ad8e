export * from './accounts'
export * from './batches'
export * from './catalogue'
export * from './workers'
