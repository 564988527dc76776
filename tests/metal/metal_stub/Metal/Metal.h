// A stub of the Metal API that src/backend/metal/metal_backend.mm uses, for the Linux syntax
// check (tests/metal/check_host.sh): each protocol, method and property as Apple's documentation
// names it (developer.apple.com/documentation/metal), no implementation. Only what the host uses
// is declared, so a misspelt selector or a wrong argument type fails the check.
#pragma once

#import <Foundation/Foundation.h>

typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
  MTLResourceStorageModeShared = 0,
  MTLResourceHazardTrackingModeTracked = 2 << 8,
};

typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
  MTLLanguageVersion2_4 = (2 << 16) + 4,
};

typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};

typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth);

@protocol MTLDevice;
@protocol MTLCommandBuffer;

@protocol MTLResource <NSObject>
@end

@protocol MTLBuffer <MTLResource>
- (void*)contents;
@property(readonly) NSUInteger length;
@end

@protocol MTLFunction <NSObject>
@property(readonly) NSString* name;
@end

@protocol MTLLibrary <NSObject>
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end

@protocol MTLComputePipelineState <NSObject>
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property(readonly) NSUInteger threadExecutionWidth;
@property(readonly) NSUInteger staticThreadgroupMemoryLength;
@end

@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer> buffer);

@protocol MTLCommandBuffer <NSObject>
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (void)commit;
- (void)waitUntilCompleted;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
@property(readonly) MTLCommandBufferStatus status;
@property(readonly) NSError* error;
@end

@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
@end

@interface MTLCompileOptions : NSObject
@property(readwrite, nonatomic) BOOL fastMathEnabled;
@property(readwrite, nonatomic) MTLLanguageVersion languageVersion;
@end

@protocol MTLDevice <NSObject>
@property(readonly) NSString* name;
@property(readonly) NSUInteger maxBufferLength;
@property(readonly) uint64_t recommendedMaxWorkingSetSize;
@property(readonly) BOOL hasUnifiedMemory;
@property(readonly) NSUInteger maxThreadgroupMemoryLength;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction error:(NSError**)error;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                   length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void* pointer, NSUInteger length))deallocator;
@end

id<MTLDevice> MTLCreateSystemDefaultDevice(void);
