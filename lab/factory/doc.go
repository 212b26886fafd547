// Package factory is the lab's Image Factory: the HTTP API of
// siderolabs/image-factory (what factory.talos.dev serves), at a local
// address, so that the talos provider registers its schematic and fetches
// its ISO from it as from the real one.
//
//	f, _ := factory.Start("127.26.0.1:0", factory.Options{})
//	defer f.Close()
//	url := f.URL() // the talos provider's image_factory
//
// Routes, as the factory's public API has them:
//
//   - POST /schematics, body a schematic as YAML: 201 with
//     {"id": ..., "schematic": ...}, the ID the hex SHA-256 of the
//     schematic marshalled as YAML with 4-space indentation (computed here
//     on its own, from the factory's data format; a test checks it against
//     the provider's and the IDs of REAL-SERVERS.md). With Options.Owner,
//     the schematic stored (and hashed, and served) carries an owner field
//     the client did not send, as a factory serving accounts may add
//     fields: the ID answered is then not the client's computation, and
//     only that ID has images and installers. A body that is not a
//     schematic (bad YAML, an unknown field) is 400, as the factory's strict
//     decoder refuses it. GET /schematics/{id}: the schematic's YAML, or
//     404 "schematic not found".
//   - GET /versions: the Talos versions it builds images of (a JSON array);
//     GET /version/{version}/extensions/official: the official extensions
//     of a version.
//   - GET and HEAD /image/{schematic}/{version}/{path}: the image, with
//     its Content-Length. The lab builds metal-<arch>.iso and nocloud-<arch>.iso (amd64,
//     arm64); another path is 404. An unknown schematic or version is 404;
//     a schematic naming an extension that version does not have is 400.
//   - GET and HEAD /v2/{image}-installer/{schematic}/manifests/{version}:
//     the installer image of the registry side (what
//     factory.talos.dev/metal-installer/<id>:<version> resolves to), an
//     OCI image index; 404 MANIFEST_UNKNOWN for an unknown schematic or
//     version, as a registry answers.
//
// The ISO is a real file whose content carries what it boots (iso.go): a
// header (magic, Talos version, architecture, schematic ID and YAML) and
// padding to ISOSize, so that two schematics or versions give two files
// of different SHA-256. lab/talosvm reads it back (ReadISO) to boot a
// node of that version and those extensions; a file without the header
// (an empty placeholder) is no bootable medium.
//
// What still differs from the real factory: the real one answers POST
// with {"id"} alone and keeps its own set of added fields (the lab adds
// owner only, at the end of the document); its images and installers are
// built, not the lab's stand-in files.
//
// Every schematic registered is kept in memory for the factory's life:
// Extensions answers what an installer image of that schematic carries
// (lab/talosvm's view of the installed image).
package factory
