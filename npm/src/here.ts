// The directory of the compiled module. This is the CommonJS form; the
// build replaces dist/esm/here.js with `import.meta.url` (see scripts/build.sh).
export const here: string = __dirname;
