// Package template keeps the VM templates of instant start: an
// image booted once with a neutral identity, its guest agent answering,
// then saved by libvirt (memory and device state) with the disk overlay
// it wrote. A clone is restored from one (its own header in front of the
// template's qemu stream, package saveimage) with its own copy of the
// overlay, so that no qemu ever opens a template's files.
//
// A template lives in <state_dir>/templates/<key>/, root's alone (0700):
// state (libvirt's save image), disk.qcow2 (the overlay, over the image's
// disk), cidata.iso (the neutral cloud-init volume) and template.json
// (Meta). Its key is its image's digest, its shape and crimux's version:
// a clone's domain must be its template's, device for device.
package template
