# keel's tiny test guest: one 512-byte x86 boot sector (GNU as syntax).
#
# SeaBIOS loads it at 0x7c00 in real mode. It enables the A20 line, enters
# "unreal" mode (4 GiB data segment limit, back in real mode, so the BIOS
# timer interrupt keeps working) and then does what its mode byte says:
#
#   'i' idle:  halts between timer ticks (18.2 Hz), counting them
#   'f' fill:  writes a word into every 4 KiB page of MIB MiB from 1 MiB
#              up (so they are non-zero and must be copied), then idles
#   'd' dirty: rewrites every page of MIB MiB forever, with interrupts
#              off (a busy vCPU: a migration converges only if the link
#              outruns it)
#
# At boot it writes three lines to the first serial port (COM1, which the
# QEMU driver logs to the guest's console file): that it booted, its mode
# byte, and that it runs.
#
# The heartbeat is the 32-bit word at physical address 0x1000: it rises
# with every tick (idle, fill) or every pass over the memory (dirty).
# 0x1004 holds the magic "KEEL" once the guest runs; 0x1008 its mode byte.
# The mode byte is at offset 0x1fa of the sector and the MiB count (16
# bits) at 0x1fc; guest.go patches them per instance.
#
# Rebuild guest.bin (the test checks it is current):
#   as --32 -o guest.o guest.S && objcopy -O binary -j .text guest.o guest.bin

	.code16
	.text
	.globl	_start
_start:
	cli
	xorw	%ax, %ax
	movw	%ax, %ds
	movw	%ax, %es
	movw	%ax, %ss
	movw	$0x7c00, %sp
	ljmp	$0, $0x7c00 + (norm - _start)
norm:
	inb	$0x92, %al		# fast A20 gate on
	orb	$2, %al
	andb	$0xfe, %al
	outb	%al, $0x92
	lgdtl	0x7c00 + (gdtr - _start)
	movl	%cr0, %eax
	orb	$1, %al
	movl	%eax, %cr0		# protected mode
	jmp	1f
1:	movw	$8, %bx
	movw	%bx, %ds		# 4 GiB flat data segment
	movw	%bx, %es
	andb	$0xfe, %al
	movl	%eax, %cr0		# back to real mode; the limits stay
	xorw	%ax, %ax
	movw	%ax, %ds
	movw	%ax, %es
	movl	$0, 0x1000
	movl	$0x4c45454b, 0x1004	# "KEEL"
	movw	$0x7c00 + (hello - _start), %si
	call	puts
	movb	0x7c00 + mode_off, %al
	movb	%al, 0x1008
	outb	%al, %dx		# the mode byte, on the line puts began
	movw	$0x7c00 + (running - _start), %si
	call	puts
	movb	0x1008, %al
	movzwl	0x7c00 + mib_off, %ecx
	shll	$20, %ecx
	addl	$0x100000, %ecx		# ecx: end of the memory touched
	cmpb	$'d', %al
	je	dirty
	cmpb	$'f', %al
	jne	idle
	movl	$0x4c45454b, %eax
	call	pass
idle:
	sti
2:	hlt
	incl	0x1000
	jmp	2b
dirty:
	incl	0x1000
	movl	0x1000, %eax
	call	pass
	jmp	dirty

# pass writes eax into the first word of every page in [1 MiB, ecx).
pass:
	movl	$0x100000, %esi
3:	cmpl	%ecx, %esi
	jae	4f
	addr32 movl %eax, (%esi)
	addl	$4096, %esi
	jmp	3b
4:	ret

# puts writes the NUL-terminated string at si to COM1 (dx is left 0x3f8).
puts:
	movw	$0x3f8, %dx
5:	movb	(%si), %al
	testb	%al, %al
	jz	6f
	outb	%al, %dx
	incw	%si
	jmp	5b
6:	ret

hello:
	.asciz	"keel guest: booted from its 512-byte boot sector\r\nkeel guest: mode "
running:
	.asciz	"\r\nkeel guest: running\r\n"

	.p2align 3
gdt:
	.quad	0
	.quad	0x00cf92000000ffff	# data: base 0, limit 4 GiB, writable
gdtr:
	.word	gdtr - gdt - 1
	.long	0x7c00 + (gdt - _start)

	.set	mode_off, 0x1fa
	.set	mib_off, 0x1fc
	.org	0x1fa
	.byte	'i'			# mode
	.byte	0
	.word	0			# MiB
	.byte	0x55, 0xaa
