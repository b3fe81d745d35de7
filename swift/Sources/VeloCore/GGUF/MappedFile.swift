#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A read-only memory map of a whole file. Weights are used in place, never copied.
public final class MappedFile: @unchecked Sendable {
    public let path: String
    public let size: Int
    public let base: UnsafeRawPointer?

    public init(path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY)
        if fd < 0 {
            let err = errno
            throw VeloError(.io, "cannot open \(path): \(String(cString: strerror(err)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw VeloError(.io, "cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw VeloError(.io, "\(path) is not a regular file")
        }
        size = Int(st.st_size)
        if size == 0 {
            base = nil
            return
        }
        let p = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0)
        guard let p, p != MAP_FAILED else {
            throw VeloError(.io, "cannot map \(path): \(String(cString: strerror(errno)))")
        }
        base = UnsafeRawPointer(p)
    }

    deinit {
        if let base { munmap(UnsafeMutableRawPointer(mutating: base), size) }
    }
}
