// usage: node pq.mjs file.parquet "SQL over view t" — prints one JSON object per row.
// DuckDB reads Parquet offline (the parquet extension is built in), so tests
// check kandle's files with an independent reader.
import { DuckDBInstance } from '@duckdb/node-api';
const [file, sql = 'SELECT * FROM t'] = process.argv.slice(2);
const db = await DuckDBInstance.create(':memory:', { autoinstall_known_extensions: 'false' });
const con = await db.connect();
await con.run(`CREATE VIEW t AS SELECT * FROM read_parquet('${file.replace(/'/g, "''")}')`);
for (const row of (await con.runAndReadAll(sql)).getRowObjectsJson()) console.log(JSON.stringify(row));
