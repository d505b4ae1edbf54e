// Package saveimage reads libvirt save images and feeds clones of them.
//
// A VM template is one libvirt save image: a 92-byte header, the domain
// XML and the <qemu-save-cookie>, then qemu's raw migration stream.
// libvirt restores an image with no replacement XML by trusting the XML
// in its header, and it reads the image strictly in order, handing the
// same fd to qemu for the stream. So a clone needs no copy of the
// template: crimux writes a new header with the clone's XML into a FIFO,
// splices the template's unchanged stream behind it, and restores from
// the FIFO.
//
// The package owns the header format of libvirt 9.0 (Read, Parse) and
// that FIFO writer (StartFeed). It calls no libvirt API: the caller
// restores from Feed.Path and then waits for the feed.
package saveimage
