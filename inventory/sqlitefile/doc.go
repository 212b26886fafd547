// Package sqlitefile reads the rows of a table from a copy of an SQLite
// database file, without SQLite: migrate init pulls an application's
// database out of an old VM through the files API (Jellyfin's users are
// in its jellyfin.db) and reads it here, so nothing runs in the VM and a
// VM without python3 or sqlite3 is read all the same.
//
//	db, err := sqlitefile.Open(file, size, wal, walSize) // wal may be nil
//	rows, err := db.Select("Users", "Username")
//
// It follows the documented file format (sqlite.org/fileformat2.html):
// the 100-byte header, table b-trees (interior and leaf pages, overflow
// chains), records and their serial types, UTF-8 and UTF-16 text, a
// rowid alias (INTEGER PRIMARY KEY), columns added by ALTER TABLE after a
// row was written (NULL), and the write-ahead log beside the database
// (the -wal file: frames up to the last valid commit, salts and
// checksums checked, as SQLite recovers a WAL without its -shm index).
//
// It only reads: no index, no WITHOUT ROWID table (refused by name), no
// query beyond naming columns, and no hot rollback journal (a database
// copied in the middle of a write may read as it was mid-write; the
// caller reads again). A corrupt file is an error naming the page, never
// a panic. It imports nothing of the module.
package sqlitefile
