// Module workers (kiln's worker imports the package's ES modules).
export default { worker: { format: 'es' }, build: { target: 'es2022' }, logLevel: 'warn' };
