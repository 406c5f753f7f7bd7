package dev.opledger.client;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/** TestData reads the shared vectors in clients/go/fingerprint/testdata. */
final class TestData {
  private TestData() {}

  static Path dir() {
    return Path.of(System.getProperty("opledger.testdata", "../go/fingerprint/testdata"));
  }

  /**
   * Vectors parses a vectors file; JSON numbers become doubles, as in a Struct on the wire (the
   * canonicalization vectors hold numbers no double carries as written, on purpose, which
   * Args.fromJson would refuse).
   */
  static List<Value> vectors(String file) throws IOException {
    Struct.Builder root = Struct.newBuilder();
    JsonFormat.parser().merge(Files.readString(dir().resolve(file), StandardCharsets.UTF_8), root);
    return root.build().getFieldsOrThrow("vectors").getListValue().getValuesList();
  }

  /**
   * Shared reads a file of clients/testdata (the vectors every client checks) through Args.fromJson,
   * as a client reads a model's arguments.
   */
  static Struct shared(String file) throws IOException {
    Path path = dir().resolve("../../../testdata").resolve(file).normalize();
    return Args.fromJson(Files.readString(path, StandardCharsets.UTF_8));
  }

  static String str(Value v, String field) {
    return v.getStructValue().getFieldsOrThrow(field).getStringValue();
  }
}
