// A minimal Spark 4.3 DSv2 changelog connector for the benchmarks: it serves a changelog
// written as Arrow IPC files, one per commit version, so that Spark's own CDC
// post-processing (`spark.read.changes` / `spark.readStream.changes`) can be timed on the
// same rows as ours. Not part of the package; compiled by tests/bench/native_connector.py.
//
// A table `<catalog>.default.<name>` is the folder `<root>/<name>` holding
//   schema.json            the changelog's Spark schema (StructType JSON)
//   changelog.properties   rowId (comma-separated), rowVersion, containsCarryoverRows,
//                          representsUpdateAsDeleteAndInsert, containsIntermediateChanges
//   v<version>.arrow       one commit's change rows (Arrow IPC file format)
// Catalog option `root` names the folder; stream option `commitsPerTrigger` (default 1)
// sets how many commits a micro-batch reads.
package spark_cdc_bench;

import java.io.IOException;
import java.io.Serializable;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Changelog;
import org.apache.spark.sql.connector.catalog.ChangelogContext;
import org.apache.spark.sql.connector.catalog.ChangelogRange;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

public class BenchChangelogCatalog implements TableCatalog {
  private String name;
  private Path root;

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    this.root = Paths.get(options.get("root"));
  }

  @Override
  public String name() {
    return name;
  }

  private Path folder(Identifier ident) throws org.apache.spark.sql.catalyst.analysis.NoSuchTableException {
    Path path = root.resolve(ident.name());
    if (!Files.isDirectory(path)) {
      throw new org.apache.spark.sql.catalyst.analysis.NoSuchTableException(ident);
    }
    return path;
  }

  @Override
  public Identifier[] listTables(String[] namespace) {
    try (Stream<Path> names = Files.list(root)) {
      return names.map(p -> Identifier.of(namespace, p.getFileName().toString()))
          .toArray(Identifier[]::new);
    } catch (IOException e) {
      throw new RuntimeException(e);
    }
  }

  @Override
  public Table loadTable(Identifier ident) throws org.apache.spark.sql.catalyst.analysis.NoSuchTableException {
    ArrowChangelog changelog = new ArrowChangelog(folder(ident), ident.name(), null);
    return new Table() {
      @Override public String name() { return ident.name(); }
      @Override public Column[] columns() { return changelog.columns(); }
      @Override public Set<TableCapability> capabilities() { return EnumSet.noneOf(TableCapability.class); }
    };
  }

  @Override
  public Changelog loadChangelog(Identifier ident, ChangelogContext context, CaseInsensitiveStringMap options)
      throws org.apache.spark.sql.catalyst.analysis.NoSuchTableException {
    return new ArrowChangelog(folder(ident), ident.name(), context);
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw new UnsupportedOperationException("read-only");
  }

  @Override
  public boolean dropTable(Identifier ident) {
    return false;
  }

  @Override
  public void renameTable(Identifier from, Identifier to) {
    throw new UnsupportedOperationException("read-only");
  }

  /** One table's changelog: its schema, declared flags and commit files. */
  static final class ArrowChangelog implements Changelog {
    private final Path folder;
    private final String name;
    private final ChangelogContext context;
    private final StructType schema;
    private final Properties flags = new Properties();

    ArrowChangelog(Path folder, String name, ChangelogContext context) {
      this.folder = folder;
      this.name = name;
      this.context = context;
      try {
        String json = new String(Files.readAllBytes(folder.resolve("schema.json")), StandardCharsets.UTF_8);
        this.schema = (StructType) DataType.fromJson(json);
        flags.load(Files.newBufferedReader(folder.resolve("changelog.properties")));
      } catch (IOException e) {
        throw new RuntimeException(e);
      }
    }

    @Override public String name() { return name; }

    @Override
    public Column[] columns() {
      return Arrays.stream(schema.fields())
          .map(f -> Column.create(f.name(), f.dataType(), f.nullable()))
          .toArray(Column[]::new);
    }

    private boolean flag(String key) {
      return Boolean.parseBoolean(flags.getProperty(key, "false"));
    }

    @Override public boolean containsCarryoverRows() { return flag("containsCarryoverRows"); }
    @Override public boolean containsIntermediateChanges() { return flag("containsIntermediateChanges"); }
    @Override public boolean representsUpdateAsDeleteAndInsert() { return flag("representsUpdateAsDeleteAndInsert"); }

    @Override
    public NamedReference[] rowId() {
      String ids = flags.getProperty("rowId", "").trim();
      if (ids.isEmpty()) {
        return new NamedReference[0];
      }
      return Arrays.stream(ids.split(",")).map(s -> Expressions.column(s.trim()))
          .toArray(NamedReference[]::new);
    }

    @Override
    public NamedReference rowVersion() {
      String version = flags.getProperty("rowVersion", "").trim();
      return version.isEmpty() ? Changelog.super.rowVersion() : Expressions.column(version);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new ArrowScan(folder, schema, versions(), context, options);
    }

    private long[] versions() {
      try (Stream<Path> files = Files.list(folder)) {
        TreeSet<Long> found = new TreeSet<>();
        files.map(p -> p.getFileName().toString())
            .filter(n -> n.startsWith("v") && n.endsWith(".arrow"))
            .forEach(n -> found.add(Long.parseLong(n.substring(1, n.length() - 6))));
        return found.stream().mapToLong(Long::longValue).toArray();
      } catch (IOException e) {
        throw new RuntimeException(e);
      }
    }
  }

  /** The versions a read covers, from the context's version range (others: everything). */
  static long[] inRange(long[] versions, ChangelogContext context) {
    if (context == null || !(context.range() instanceof ChangelogRange.VersionRange)) {
      return versions;
    }
    ChangelogRange.VersionRange range = (ChangelogRange.VersionRange) context.range();
    long start = Long.parseLong(range.startingVersion());
    Optional<String> end = range.endingVersion();
    return Arrays.stream(versions).filter(v ->
        (range.startingBoundInclusive() ? v >= start : v > start)
            && (end.isEmpty() || (range.endingBoundInclusive()
                ? v <= Long.parseLong(end.get()) : v < Long.parseLong(end.get()))))
        .toArray();
  }

  static final class ArrowScan implements Scan, Batch {
    private final Path folder;
    private final StructType schema;
    private final long[] versions;
    private final CaseInsensitiveStringMap options;

    ArrowScan(Path folder, StructType schema, long[] all, ChangelogContext context,
        CaseInsensitiveStringMap options) {
      this.folder = folder;
      this.schema = schema;
      this.versions = inRange(all, context);
      this.options = options;
    }

    @Override public StructType readSchema() { return schema; }
    @Override public Batch toBatch() { return this; }

    @Override
    public InputPartition[] planInputPartitions() {
      return Arrays.stream(versions).mapToObj(v -> new CommitPartition(folder.resolve("v" + v + ".arrow").toString()))
          .toArray(InputPartition[]::new);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ArrowReaderFactory();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new ArrowStream(folder, versions, options.getInt("commitsPerTrigger", 1));
    }
  }

  /** Offsets count commits served: offset n = the first n commits of the range. */
  static final class CommitOffset extends Offset {
    final long served;

    CommitOffset(long served) {
      this.served = served;
    }

    @Override
    public String json() {
      return Long.toString(served);
    }
  }

  static final class ArrowStream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private final Path folder;
    private final long[] versions;
    private final int perTrigger;

    ArrowStream(Path folder, long[] versions, int perTrigger) {
      this.folder = folder;
      this.versions = versions;
      this.perTrigger = perTrigger;
    }

    @Override public Offset initialOffset() { return new CommitOffset(0); }
    @Override public Offset deserializeOffset(String json) { return new CommitOffset(Long.parseLong(json.trim())); }
    @Override public void commit(Offset end) { }
    @Override public void stop() { }
    @Override public void prepareForTriggerAvailableNow() { }
    @Override public ReadLimit getDefaultReadLimit() { return ReadLimit.maxFiles(perTrigger); }

    @Override
    public Offset latestOffset() {
      return new CommitOffset(versions.length);
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      long from = start == null ? 0 : ((CommitOffset) start).served;
      long step = limit instanceof ReadAllAvailable ? versions.length : perTrigger;
      return new CommitOffset(Math.min(versions.length, from + step));
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      int from = (int) ((CommitOffset) start).served;
      int to = (int) ((CommitOffset) end).served;
      List<InputPartition> parts = new ArrayList<>();
      for (int i = from; i < to; i++) {
        parts.add(new CommitPartition(folder.resolve("v" + versions[i] + ".arrow").toString()));
      }
      return parts.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ArrowReaderFactory();
    }
  }

  static final class CommitPartition implements InputPartition {
    final String file;

    CommitPartition(String file) {
      this.file = file;
    }
  }

  static final class ArrowReaderFactory implements PartitionReaderFactory {
    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new ArrowRows(((CommitPartition) partition).file);
    }
  }

  /** One commit file's rows, batch by batch through Spark's Arrow column vectors. */
  static final class ArrowRows implements PartitionReader<InternalRow> {
    private final BufferAllocator allocator = new RootAllocator();
    private final ArrowFileReader reader;
    private Iterator<InternalRow> rows = java.util.Collections.emptyIterator();
    private ColumnarBatch batch;
    private InternalRow current;

    ArrowRows(String file) {
      try {
        reader = new ArrowFileReader(FileChannel.open(Paths.get(file), StandardOpenOption.READ), allocator);
      } catch (IOException e) {
        throw new RuntimeException(e);
      }
    }

    @Override
    public boolean next() throws IOException {
      while (!rows.hasNext()) {
        if (!reader.loadNextBatch()) {
          return false;
        }
        VectorSchemaRoot root = reader.getVectorSchemaRoot();
        List<FieldVector> vectors = root.getFieldVectors();
        ColumnVector[] columns = new ColumnVector[vectors.size()];
        for (int i = 0; i < columns.length; i++) {
          columns[i] = new ArrowColumnVector(vectors.get(i));
        }
        batch = new ColumnarBatch(columns, root.getRowCount());
        rows = batch.rowIterator();
      }
      current = rows.next().copy();
      return true;
    }

    @Override
    public InternalRow get() {
      return current;
    }

    @Override
    public void close() throws IOException {
      reader.close();
      allocator.close();
    }
  }
}
