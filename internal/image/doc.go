// Package image is keel's image service: a subset of Glance's v2 API
// (create, show, list, delete, upload and download of the data) over a
// Store that keeps each image in a directory as Glance's file store does:
// the data in a file named by the image's ID, beside it the image's
// record as JSON. The directory is under the data dir by default; several
// keel server replicas that share one directory share the images.
//
// An upload streams into a temporary file created exclusively (a second
// upload of the same image at once is refused), is hashed on the way
// (checksum MD5, os_hash_value SHA-512), bounded by the size cap, and
// renamed into place only once complete: an upload cut short, too large
// or failing leaves the image queued and no file behind. Records are
// replaced by rename, so a reader never sees half of one.
package image
